#include "train/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>

#include "core/error.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace brioche::train {

namespace {

using json = nlohmann::ordered_json;

struct LineContext {
  const std::string& path;
  int line;
};

[[noreturn]] void bad_line(const LineContext& at, const std::string& what) { fail(at.path, ":", at.line, ": ", what); }

std::string string_field(const json& obj, const char* key, const LineContext& at) {
  if (!obj.contains(key)) bad_line(at, std::string("missing \"") + key + "\"");
  if (!obj[key].is_string()) bad_line(at, std::string("\"") + key + "\" must be a string, got " + obj[key].type_name());
  return obj[key].get<std::string>();
}

void check_messages(const json& messages, const LineContext& at) {
  if (!messages.is_array() || messages.empty()) bad_line(at, "\"messages\" must be a non-empty array");
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad_line(at, "message " + std::to_string(i) + " needs a string \"role\"");
  }
}

// A prompt given as a string or a message list, as messages.
json prompt_messages(const json& prompt, const LineContext& at) {
  if (prompt.is_string()) return json::array({{{"role", "user"}, {"content", prompt}}});
  check_messages(prompt, at);
  return prompt;
}

// A chosen/rejected reply: a string, or messages whose last is the assistant's.
json reply_message(const json& reply, const char* key, const LineContext& at) {
  if (reply.is_string()) return {{"role", "assistant"}, {"content", reply}};
  if (reply.is_array() && !reply.empty() && reply.back().is_object() && reply.back().value("role", "") == "assistant")
    return reply.back();
  bad_line(at, std::string("\"") + key + "\" must be a string or messages ending with an assistant message");
}

struct Rendered {
  std::string prompt;
  std::string response;
};

Rendered render_split(const ChatRenderer& render, const json& prompt_msgs, const json& reply, const LineContext& at) {
  json full = prompt_msgs;
  full.push_back(reply);
  std::string prompt = render(prompt_msgs, true);
  std::string all = render(full, false);
  if (all.compare(0, prompt.size(), prompt) != 0)
    bad_line(at, "the chat template does not render the prompt as a prefix of the full conversation");
  std::string response = all.substr(prompt.size());
  return {std::move(prompt), std::move(response)};
}

class Tokenize {
 public:
  explicit Tokenize(const DatasetOptions& o) : o_(o) {}
  std::vector<int32_t> prompt(const std::string& text) const {
    auto ids = o_.tokenizer->encode(text, {.add_special = false, .parse_special = true});
    const int32_t bos = o_.tokenizer->bos_id();
    if (o_.tokenizer->add_bos() && bos >= 0 && (ids.empty() || ids.front() != bos)) ids.insert(ids.begin(), bos);
    return ids;
  }
  std::vector<int32_t> response(const std::string& text) const {
    return o_.tokenizer->encode(text, {.add_special = false, .parse_special = true});
  }

 private:
  const DatasetOptions& o_;
};

// Fits prompt + the longest response into max_len (see the header).
bool truncate(std::vector<int32_t>& prompt, std::vector<std::vector<int32_t>*> responses, int max_len, bool* overflow) {
  size_t longest = 0;
  for (auto* r : responses) longest = std::max(longest, r->size());
  if (prompt.size() + longest <= size_t(max_len)) return false;
  if (longest + 1 >= size_t(max_len)) {
    *overflow = true;
    if (!prompt.empty()) prompt.erase(prompt.begin(), prompt.end() - 1);
    for (auto* r : responses) {
      if (r->size() > size_t(max_len) - prompt.size()) r->resize(size_t(max_len) - prompt.size());
    }
    return true;
  }
  prompt.erase(prompt.begin(), prompt.begin() + int64_t(prompt.size() + longest - size_t(max_len)));
  return true;
}

}  // namespace

ChatRenderer make_chat_renderer(const std::string& source, const tokenizer::Tokenizer& tok) {
  std::string bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
  std::string eos = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
  if (source.empty()) {
    return [](const nlohmann::ordered_json& messages, bool gen) {
      return tmpl::plain_chat_format({.messages = messages, .add_generation_prompt = gen});
    };
  }
  auto parsed = std::make_shared<tmpl::ChatTemplate>(tmpl::ChatTemplate::parse(source, "chat_template"));
  return [parsed, bos, eos](const nlohmann::ordered_json& messages, bool gen) {
    return tmpl::render_chat(*parsed,
                             {.messages = messages, .add_generation_prompt = gen, .bos_token = bos, .eos_token = eos});
  };
}

Dataset load_dataset(const std::string& path, const DatasetOptions& o) {
  BRIOCHE_CHECK(o.tokenizer && o.render, "load_dataset: a tokenizer and a chat renderer are required");
  BRIOCHE_CHECK(o.max_seq_length >= 2, "max_seq_length must be at least 2, got ", o.max_seq_length);
  std::ifstream in(path);
  BRIOCHE_CHECK(in.good(), "cannot open dataset ", path);
  Dataset ds;
  const Tokenize tok(o);
  std::string text;
  int line_no = 0;
  while (std::getline(in, text)) {
    ++line_no;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const LineContext at{path, line_no};
    json obj;
    try {
      obj = json::parse(text);
    } catch (const std::exception& e) {
      bad_line(at, std::string("invalid JSON: ") + e.what());
    }
    if (!obj.is_object()) bad_line(at, "expected a JSON object");
    if (obj.contains("dpo") && obj["dpo"].is_object()) obj = obj["dpo"];
    bool overflow = false, cut = false;
    const bool is_pref = obj.contains("chosen") || obj.contains("rejected");
    if (o.preference) {
      if (!is_pref) bad_line(at, "this method needs preference data {\"prompt\", \"chosen\", \"rejected\"}");
      if (!obj.contains("prompt")) bad_line(at, "missing \"prompt\"");
      if (!obj.contains("chosen") || !obj.contains("rejected")) bad_line(at, "needs both \"chosen\" and \"rejected\"");
      const json prompt = prompt_messages(obj["prompt"], at);
      Rendered c = render_split(o.render, prompt, reply_message(obj["chosen"], "chosen", at), at);
      Rendered r = render_split(o.render, prompt, reply_message(obj["rejected"], "rejected", at), at);
      if (c.prompt != r.prompt) bad_line(at, "chosen and rejected render different prompts");
      TokenizedPair p{tok.prompt(c.prompt), tok.response(c.response), tok.response(r.response)};
      if (p.chosen.empty() || p.rejected.empty()) bad_line(at, "empty chosen or rejected response");
      cut = truncate(p.prompt, {&p.chosen, &p.rejected}, o.max_seq_length, &overflow);
      ds.pairs.push_back(std::move(p));
    } else {
      TokenizedExample e;
      if (obj.contains("messages")) {
        json messages = obj["messages"];
        check_messages(messages, at);
        if (messages.back()["role"] != "assistant") bad_line(at, "the last message must be the assistant's");
        json reply = messages.back();
        messages.erase(messages.size() - 1);
        Rendered r = render_split(o.render, messages, reply, at);
        e = {tok.prompt(r.prompt), tok.response(r.response)};
      } else if (obj.contains("completion")) {
        Rendered r = render_split(o.render, prompt_messages(obj["prompt"], at),
                                  {{"role", "assistant"}, {"content", string_field(obj, "completion", at)}}, at);
        e = {tok.prompt(r.prompt), tok.response(r.response)};
      } else if (obj.contains("text")) {
        e = {{}, tok.prompt(string_field(obj, "text", at))};
        if (e.response.size() > size_t(o.max_seq_length)) e.response.resize(size_t(o.max_seq_length)), cut = true;
      } else if (is_pref) {
        bad_line(at, "preference data needs a preference method (dpo, orpo, simpo, ipo)");
      } else {
        bad_line(at, "unknown format: expected \"messages\", \"prompt\"+\"completion\", \"text\", or preference keys");
      }
      if (e.response.empty()) bad_line(at, "empty response");
      if (!e.prompt.empty()) cut = truncate(e.prompt, {&e.response}, o.max_seq_length, &overflow);
      ds.examples.push_back(std::move(e));
    }
    if (cut) ++ds.truncated;
    if (overflow) {
      ++ds.response_overflow;
      if (!o.quiet)
        std::fprintf(stderr,
                     "warning: %s:%d: the response alone exceeds max_seq_length %d; it was cut and only "
                     "the last prompt token kept\n",
                     path.c_str(), line_no, o.max_seq_length);
    }
  }
  BRIOCHE_CHECK(ds.size() > 0, path, ": no examples");
  if (ds.truncated > 0 && !o.quiet)
    std::fprintf(stderr, "warning: %s: %d examples longer than max_seq_length %d were left-truncated (prompt side)\n",
                 path.c_str(), ds.truncated, o.max_seq_length);
  return ds;
}

Dataset split_off(Dataset& data, double fraction, uint64_t seed) {
  const size_t n = data.size();
  BRIOCHE_CHECK(fraction > 0 && fraction < 1, "test split: expected a fraction in (0, 1), got ", fraction);
  const size_t k = std::max<size_t>(1, size_t(std::llround(fraction * double(n))));
  BRIOCHE_CHECK(k < n, "test split: ", fraction, " of ", n, " rows leaves ", n - std::min(k, n),
                " for training (need at least 1)");
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::mt19937_64 rng(seed);
  for (size_t i = n - 1; i > 0; --i) std::swap(order[i], order[size_t(rng() % (i + 1))]);
  std::vector<bool> held(n, false);
  for (size_t i = 0; i < k; ++i) held[order[i]] = true;
  Dataset test, kept;
  auto move_rows = [&](auto& from, auto& to_test, auto& to_keep) {
    for (size_t i = 0; i < from.size(); ++i) (held[i] ? to_test : to_keep).push_back(std::move(from[i]));
  };
  move_rows(data.examples, test.examples, kept.examples);
  move_rows(data.pairs, test.pairs, kept.pairs);
  data.examples = std::move(kept.examples);
  data.pairs = std::move(kept.pairs);
  return test;
}

}  // namespace brioche::train
