#include "data/example.h"

#include <cmath>
#include <cstdlib>

namespace brioche::data {

namespace {

std::string describe(const json& v) { return std::string("a JSON ") + v.type_name(); }

const json& field(const json& row, const char* key) {
  if (!row.contains(key)) throw RowError(std::string("missing \"") + key + "\" (found " + key_list(row) + ")");
  return row[key];
}

std::string string_field(const json& row, const char* key) {
  const json& v = field(row, key);
  if (!v.is_string()) throw RowError(std::string("\"") + key + "\" must be a string, found " + describe(v));
  return v.get<std::string>();
}

json user(const std::string& content) { return {{"role", "user"}, {"content", content}}; }
json assistant(const std::string& content) { return {{"role", "assistant"}, {"content", content}}; }

void check_messages(const json& messages, const std::string& what) {
  if (!messages.is_array()) throw RowError(what + " must be a list of messages, found " + describe(messages));
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw RowError(what + " message " + std::to_string(i) + ": expected an object with a string \"role\", found " +
                     (m.is_object() ? key_list(m) : describe(m)));
    if (!m.contains("content") && !m.contains("tool_calls"))
      throw RowError(what + " message " + std::to_string(i) + ": no \"content\"");
  }
}

// A prompt given as a string (one user message) or as messages.
json prompt_messages(const json& prompt, const std::string& what) {
  if (prompt.is_string()) return json::array({user(prompt.get<std::string>())});
  check_messages(prompt, what);
  return prompt;
}

// A number, or a number written as a string ("4", "7.5"); nullopt for "N/A",
// null or an empty string; RowError for anything else.
std::optional<double> rating(const json& v, const std::string& what) {
  if (v.is_number()) return v.get<double>();
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s.empty() || s == "N/A" || s == "n/a" || s == "NA") return std::nullopt;
    char* end = nullptr;
    const double x = std::strtod(s.c_str(), &end);
    if (end != s.c_str() && *end == '\0' && std::isfinite(x)) return x;
  }
  throw RowError(what + ": expected a number (or \"N/A\"), found " + v.dump());
}

// annotations[aspect]: {"Rating": "4", ...}, [{"Rating": ...}], or a bare rating.
std::optional<double> aspect_rating(const json& annotations, const std::string& aspect, const std::string& what) {
  if (!annotations.is_object() || !annotations.contains(aspect)) return std::nullopt;
  const json* a = &annotations[aspect];
  if (a->is_array()) {
    if (a->empty()) return std::nullopt;
    a = &(*a)[0];
  }
  if (a->is_object()) {
    if (!a->contains("Rating")) return std::nullopt;
    return rating((*a)["Rating"], what + " annotations." + aspect + ".Rating");
  }
  return rating(*a, what + " annotations." + aspect);
}

std::optional<double> fine_grained(const json& c, const std::string& what) {
  if (c.contains("fine-grained_score")) return rating(c["fine-grained_score"], what + " fine-grained_score");
  if (!c.contains("annotations") || !c["annotations"].is_object()) return std::nullopt;
  double sum = 0;
  int n = 0;
  for (const auto& [aspect, value] : c["annotations"].items()) {
    if (auto r = aspect_rating(c["annotations"], aspect, what)) sum += *r, ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

std::string completion_text(const json& c, const std::string& what) {
  for (const char* key : {"response", "text", "completion", "content", "output"}) {
    if (c.contains(key)) {
      if (!c[key].is_string()) throw RowError(what + " \"" + key + "\" must be a string, found " + describe(c[key]));
      return c[key].get<std::string>();
    }
  }
  throw RowError(what + ": expected the text under \"response\" (or \"text\", \"completion\", \"content\"), found " +
                 key_list(c));
}

Example ultrafeedback(const json& row, const ScoreOptions& scores) {
  Example ex{.layout = Layout::UltraFeedback};
  const char* prompt_key = row.contains("instruction") ? "instruction" : "prompt";
  ex.prompt = prompt_messages(field(row, prompt_key), std::string("\"") + prompt_key + "\"");
  const json& completions = field(row, "completions");
  if (!completions.is_array()) throw RowError("\"completions\" must be a list, found " + describe(completions));
  std::string source = scores.source;
  if (source == "auto") {
    bool all_overall = !completions.empty();
    for (const json& c : completions) all_overall = all_overall && c.is_object() && c.contains("overall_score");
    source = all_overall ? "overall" : "fine-grained";
  }
  ex.score_source = source == "overall" ? "overall_score" : source == "fine-grained" ? "fine-grained" : source;
  for (size_t i = 0; i < completions.size(); ++i) {
    const json& c = completions[i];
    const std::string what = "completion " + std::to_string(i);
    if (!c.is_object()) throw RowError(what + ": expected an object, found " + describe(c));
    Reply r{.message = assistant(completion_text(c, what))};
    if (source == "overall")
      r.score = c.contains("overall_score") ? rating(c["overall_score"], what + " overall_score") : std::nullopt;
    else if (source == "fine-grained")
      r.score = fine_grained(c, what);
    else
      r.score = c.contains("annotations") ? aspect_rating(c["annotations"], source, what) : std::nullopt;
    ex.replies.push_back(std::move(r));
  }
  return ex;
}

// The reply of a chosen/rejected field: a string, or messages whose last is
// the assistant's (the messages before it are returned in `before`).
json reply_of(const json& v, const char* key, json& before) {
  before = json::array();
  if (v.is_string()) return assistant(v.get<std::string>());
  check_messages(v, std::string("\"") + key + "\"");
  if (v.empty() || v.back()["role"] != "assistant")
    throw RowError(std::string("\"") + key + "\" must end with an assistant message, found " +
                   (v.empty() ? std::string("an empty list") : "a last message of role " + v.back()["role"].dump()));
  for (size_t i = 0; i + 1 < v.size(); ++i) before.push_back(v[i]);
  return v.back();
}

// Preference layouts: prompt (optional string or messages) plus chosen and
// rejected (strings, or message lists that may repeat the prompt: H4's
// binarized rows hold the whole conversation, TRL's implicit-prompt rows too).
void preference(const json& row, Example& ex) {
  json before_c, before_r;
  json chosen = reply_of(field(row, "chosen"), "chosen", before_c);
  json rejected = reply_of(field(row, "rejected"), "rejected", before_r);
  if (before_c != before_r)
    throw RowError(
        "\"chosen\" and \"rejected\" differ before their last message (expected the same conversation "
        "with different final replies)");
  json prompt = row.contains("prompt") ? prompt_messages(row["prompt"], "\"prompt\"") : json::array();
  // A chosen list that starts with the prompt holds the whole conversation.
  const bool repeats_prompt =
      before_c.size() >= prompt.size() && std::equal(prompt.begin(), prompt.end(), before_c.begin());
  if (repeats_prompt)
    prompt = before_c;
  else
    for (const json& m : before_c) prompt.push_back(m);
  if (prompt.empty()) throw RowError("no prompt: expected \"prompt\" or messages before the chosen reply");
  ex.prompt = std::move(prompt);
  ex.replies = {Reply{.message = std::move(chosen)}, Reply{.message = std::move(rejected)}};
}

Example hh_rlhf(const json& row) {
  Example ex{.layout = Layout::HhRlhf};
  json c = parse_hh_transcript(string_field(row, "chosen"));
  json r = parse_hh_transcript(string_field(row, "rejected"));
  for (const json* t : {&c, &r}) {
    if (t->back()["role"] != "assistant")
      throw RowError(std::string("\"") + (t == &c ? "chosen" : "rejected") +
                     "\" transcript must end with an Assistant turn, found a Human turn last");
  }
  json cr = c.back(), rr = r.back();
  c.erase(c.size() - 1), r.erase(r.size() - 1);
  if (c != r)
    throw RowError(
        "\"chosen\" and \"rejected\" transcripts differ before the last Assistant turn (expected the same "
        "conversation with different final replies)");
  ex.prompt = std::move(c);
  ex.replies = {Reply{.message = std::move(cr)}, Reply{.message = std::move(rr)}};
  return ex;
}

std::string sharegpt_role(const std::string& from, size_t i) {
  if (from == "human" || from == "user") return "user";
  if (from == "gpt" || from == "assistant" || from == "chatgpt" || from == "bard" || from == "bing" || from == "model")
    return "assistant";
  if (from == "system") return "system";
  if (from == "tool" || from == "observation" || from == "function_response") return "tool";
  throw RowError("conversations[" + std::to_string(i) + "].from: expected human, gpt, system or tool, found \"" + from +
                 "\"");
}

// Chat-like messages: the last must be the assistant's reply.
void split_last_reply(json messages, Example& ex, const std::string& what) {
  if (messages.empty()) throw RowError(what + " is empty");
  if (messages.back()["role"] != "assistant")
    throw RowError(what + ": the last message must be the assistant's reply, found role " +
                   messages.back()["role"].dump());
  ex.replies = {Reply{.message = messages.back()}};
  messages.erase(messages.size() - 1);
  ex.prompt = std::move(messages);
}

}  // namespace

std::string Reply::content() const {
  if (!message.contains("content")) return "";
  const json& c = message["content"];
  if (c.is_string()) return c.get<std::string>();
  std::string out;
  if (c.is_array())
    for (const json& part : c)
      if (part.is_object() && part.contains("text") && part["text"].is_string()) out += part["text"].get<std::string>();
  return out;
}

json parse_hh_transcript(const std::string& transcript) {
  static const std::string kHuman = "Human:", kAssistant = "Assistant:";
  json turns = json::array();
  // Turn markers are "Human:" / "Assistant:" at the start or after "\n\n".
  auto marker_at = [&](size_t pos) -> const std::string* {
    if (transcript.compare(pos, kHuman.size(), kHuman) == 0) return &kHuman;
    if (transcript.compare(pos, kAssistant.size(), kAssistant) == 0) return &kAssistant;
    return nullptr;
  };
  size_t pos = transcript.find_first_not_of(" \t\r\n");
  if (pos == std::string::npos || marker_at(pos) != &kHuman)
    throw RowError("an HH-RLHF transcript must start with \"\\n\\nHuman: \", found \"" + transcript.substr(0, 40) +
                   (transcript.size() > 40 ? "...\"" : "\""));
  while (pos != std::string::npos) {
    const std::string* marker = marker_at(pos);
    size_t start = pos + marker->size();
    size_t next = start;
    while (true) {
      next = transcript.find("\n\n", next);
      if (next == std::string::npos || marker_at(next + 2)) break;
      next += 1;
    }
    std::string content = transcript.substr(start, next == std::string::npos ? std::string::npos : next - start);
    const size_t a = content.find_first_not_of(" \t\r\n"), b = content.find_last_not_of(" \t\r\n");
    content = a == std::string::npos ? "" : content.substr(a, b - a + 1);
    turns.push_back({{"role", marker == &kHuman ? "user" : "assistant"}, {"content", content}});
    pos = next == std::string::npos ? next : next + 2;
  }
  return turns;
}

Example parse_example(const json& row, Layout layout, const ScoreOptions& scores) {
  if (!row.is_object()) throw RowError("expected a JSON object, found " + describe(row));
  Example ex{.layout = layout};
  switch (layout) {
    case Layout::UltraFeedback: return ultrafeedback(row, scores);
    case Layout::UltraFeedbackBinarized: {
      preference(row, ex);
      ex.replies[0].score = rating(field(row, "score_chosen"), "\"score_chosen\"");
      ex.replies[1].score = rating(field(row, "score_rejected"), "\"score_rejected\"");
      ex.score_source = "score_chosen/score_rejected";
      return ex;
    }
    case Layout::Preference:
    case Layout::TrlConversational: preference(row, ex); return ex;
    case Layout::HhRlhf: return hh_rlhf(row);
    case Layout::Chat: {
      const json& messages = field(row, "messages");
      check_messages(messages, "\"messages\"");
      split_last_reply(messages, ex, "\"messages\"");
      return ex;
    }
    case Layout::ShareGpt: {
      const json& turns = field(row, "conversations");
      if (!turns.is_array()) throw RowError("\"conversations\" must be a list, found " + describe(turns));
      json messages = json::array();
      for (size_t i = 0; i < turns.size(); ++i) {
        const json& t = turns[i];
        const std::string what = "conversations[" + std::to_string(i) + "]";
        // {from, value} as ShareGPT writes it; some exports use OpenAI's {role, content} under the same key.
        const bool openai = t.is_object() && t.contains("role") && t.contains("content");
        const char* who = openai ? "role" : "from";
        const char* text = openai ? "content" : "value";
        if (!t.is_object() || !t.contains(who) || !t[who].is_string() || !t.contains(text) || !t[text].is_string())
          throw RowError(what + ": expected {\"from\": string, \"value\": string}, found " + t.dump().substr(0, 80));
        messages.push_back({{"role", sharegpt_role(t[who].get<std::string>(), i)}, {"content", t[text]}});
      }
      split_last_reply(std::move(messages), ex, "\"conversations\"");
      return ex;
    }
    case Layout::Alpaca: {
      std::string prompt = string_field(row, "instruction");
      if (row.contains("input") && !row["input"].is_null()) {  // some exports write null for no input
        const std::string input = string_field(row, "input");
        if (input.find_first_not_of(" \t\r\n") != std::string::npos) prompt += "\n\n" + input;
      }
      if (row.contains("system") && row["system"].is_string() && !row["system"].get<std::string>().empty())
        ex.prompt.push_back({{"role", "system"}, {"content", row["system"]}});
      ex.prompt.push_back(user(prompt));
      ex.replies = {Reply{.message = assistant(string_field(row, "output"))}};
      return ex;
    }
    case Layout::Completion:
      ex.prompt = prompt_messages(field(row, "prompt"), "\"prompt\"");
      ex.replies = {Reply{.message = assistant(string_field(row, "completion"))}};
      return ex;
    case Layout::Text: ex.text = string_field(row, "text"); return ex;
  }
  throw RowError("unknown layout");
}

}  // namespace brioche::data
