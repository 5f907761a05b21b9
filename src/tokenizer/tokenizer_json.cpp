// Loader for Hugging Face tokenizer.json (+ tokenizer_config.json).
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_limits.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"

namespace brioche::tokenizer {
namespace {

using json = nlohmann::json;

// tokenizer.json is a file a model directory hands us: it may be hostile.
// Ids index every table, so they are checked before use; vocabularies today
// reach 262,144 tokens, and ids far above the number of tokens would only
// allocate empty slots.
constexpr int64_t kMaxVocabSize = int64_t{1} << 22;
// Normalizer contents are inserted once per match (every space, for
// SentencePiece); real ones are one character.
constexpr size_t kMaxNormalizerContentBytes = 32;
constexpr int kMaxDecoderStrip = 64;

int32_t token_id_of(const json& value, const char* where, int64_t limit) {
  BRIOCHE_CHECK(value.is_number_integer(), "tokenizer.json: ", where, ": expected an integer id, found ",
                value.dump().substr(0, 100));
  const int64_t id = value.get<int64_t>();
  BRIOCHE_CHECK(id >= 0 && id < limit, "tokenizer.json: ", where, ": token id ", id, " is out of range [0, ", limit,
                ")");
  return static_cast<int32_t>(id);
}

const std::string& string_of(const json& value, const char* where) {
  BRIOCHE_CHECK(value.is_string(), "tokenizer.json: ", where, ": expected a string, found ",
                value.dump().substr(0, 100));
  return value.get_ref<const std::string&>();
}

std::string short_content(const json& value, const char* where) {
  const std::string& text = string_of(value, where);
  BRIOCHE_CHECK(text.size() <= kMaxNormalizerContentBytes, "tokenizer.json: ", where, ": content of ", text.size(),
                " bytes; the limit is ", kMaxNormalizerContentBytes);
  return text;
}

std::string type_of(const json& node, const char* where) {
  BRIOCHE_CHECK(node.is_object() && node.contains("type") && node["type"].is_string(), "tokenizer.json: ", where,
                ": expected an object with a string \"type\", found ", node.dump().substr(0, 200));
  return node["type"].get<std::string>();
}

bool flag(const json& node, const char* key, bool fallback) {
  auto it = node.find(key);
  if (it == node.end() || it->is_null()) return fallback;
  BRIOCHE_CHECK(it->is_boolean(), "tokenizer.json: \"", key, "\" must be true or false, found ",
                it->dump().substr(0, 100));
  return it->get<bool>();
}

// A {"String": "..."} or {"Regex": "..."} pattern.
void read_pattern(const json& pattern, const char* where, std::string& literal, std::shared_ptr<Regex>& regex) {
  if (pattern.is_object() && pattern.contains("String")) {
    literal = string_of(pattern["String"], where);
  } else if (pattern.is_object() && pattern.contains("Regex")) {
    regex = std::make_shared<Regex>(string_of(pattern["Regex"], where));
  } else {
    fail("tokenizer.json: ", where, ": expected pattern {\"String\"|\"Regex\": ...}, found ", pattern.dump());
  }
}

void read_normalizer(const json& node, Normalizer& out) {
  if (node.is_null()) return;
  const std::string type = type_of(node, "normalizer");
  if (type == "Sequence") {
    for (const json& child : node.at("normalizers")) read_normalizer(child, out);
  } else if (type == "NFC") {
    out.add({.kind = NormalizerStep::Kind::Nfc});
  } else if (type == "Replace") {
    NormalizerStep step{.kind = NormalizerStep::Kind::Replace};
    read_pattern(node.at("pattern"), "normalizer Replace", step.pattern, step.regex);
    step.content = short_content(node.at("content"), "normalizer Replace");
    out.add(std::move(step));
  } else if (type == "Prepend") {
    out.add(
        {.kind = NormalizerStep::Kind::Prepend, .content = short_content(node.at("prepend"), "normalizer Prepend")});
  } else if (type == "Strip") {
    out.add({.kind = NormalizerStep::Kind::Strip,
             .strip_left = flag(node, "strip_left", true),
             .strip_right = flag(node, "strip_right", true)});
  } else {
    fail("tokenizer.json: normalizer type '", type,
         "' is not supported (supported: Sequence, NFC, Replace, Prepend, Strip)");
  }
}

SplitBehavior read_behavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  fail("tokenizer.json: Split behavior '", name,
       "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

// Returns true if a ByteLevel step was seen.
bool read_pre_tokenizer(const json& node, PreTokenizer& out) {
  if (node.is_null()) return false;
  const std::string type = type_of(node, "pre_tokenizer");
  if (type == "Sequence") {
    bool byte_level = false;
    for (const json& child : node.at("pretokenizers")) byte_level |= read_pre_tokenizer(child, out);
    return byte_level;
  }
  if (type == "Split") {
    PreTokenizerStep step{.kind = PreTokenizerStep::Kind::Split};
    read_pattern(node.at("pattern"), "pre_tokenizer Split", step.literal, step.regex);
    step.behavior = read_behavior(string_of(node.at("behavior"), "pre_tokenizer Split behavior"));
    step.invert = flag(node, "invert", false);
    out.add(std::move(step));
    return false;
  }
  if (type == "ByteLevel") {
    PreTokenizerStep step{.kind = PreTokenizerStep::Kind::ByteLevel};
    step.add_prefix_space = flag(node, "add_prefix_space", true);
    if (flag(node, "use_regex", true)) step.regex = std::make_shared<Regex>(kGpt2Pattern);
    out.add(std::move(step));
    return true;
  }
  if (type == "Digits") {
    PreTokenizerStep step{.kind = PreTokenizerStep::Kind::Split};
    const bool individual = flag(node, "individual_digits", false);
    step.regex = std::make_shared<Regex>("\\p{N}");  // Rust char::is_numeric: Nd, Nl, No
    step.behavior = individual ? SplitBehavior::Isolated : SplitBehavior::Contiguous;
    out.add(std::move(step));
    return false;
  }
  if (type == "Metaspace") {
    PreTokenizerStep step{.kind = PreTokenizerStep::Kind::Metaspace};
    step.replacement = node.contains("replacement")
                           ? short_content(node["replacement"], "pre_tokenizer Metaspace replacement")
                           : std::string("\xE2\x96\x81");
    step.split = flag(node, "split", true);
    if (node.contains("prepend_scheme") && node["prepend_scheme"].is_string()) {
      const std::string scheme = node["prepend_scheme"].get<std::string>();
      if (scheme == "always")
        step.prepend_scheme = PrependScheme::Always;
      else if (scheme == "first")
        step.prepend_scheme = PrependScheme::First;
      else if (scheme == "never")
        step.prepend_scheme = PrependScheme::Never;
      else
        fail("tokenizer.json: Metaspace prepend_scheme '", scheme, "' is not always, first or never");
    } else {
      step.prepend_scheme = flag(node, "add_prefix_space", true) ? PrependScheme::Always : PrependScheme::Never;
    }
    out.add(std::move(step));
    return false;
  }
  fail("tokenizer.json: pre_tokenizer type '", type,
       "' is not supported (supported: Sequence, Split, ByteLevel, Digits, Metaspace)");
}

struct DecoderSteps {
  bool byte_level = false;
  bool byte_fallback = false;
  std::vector<std::pair<std::string, std::string>> replacements;  // applied to each token
  int strip_leading_spaces = 0;
};

void read_decoder(const json& node, DecoderSteps& out) {
  if (node.is_null()) return;
  const std::string type = type_of(node, "decoder");
  if (type == "Sequence") {
    for (const json& child : node.at("decoders")) read_decoder(child, out);
  } else if (type == "ByteLevel") {
    out.byte_level = true;
  } else if (type == "ByteFallback") {
    out.byte_fallback = true;
  } else if (type == "Fuse") {
    // Joining tokens is what decode does anyway.
  } else if (type == "Replace") {
    std::string literal;
    std::shared_ptr<Regex> regex;
    read_pattern(node.at("pattern"), "decoder Replace", literal, regex);
    BRIOCHE_CHECK(!regex, "tokenizer.json: decoder Replace with a Regex pattern is not supported");
    out.replacements.emplace_back(literal, short_content(node.at("content"), "decoder Replace"));
  } else if (type == "Strip") {
    BRIOCHE_CHECK(node.value("content", json(" ")) == " " && node.value("stop", json(0)) == 0,
                  "tokenizer.json: decoder Strip is supported for leading spaces only, found ",
                  node.dump().substr(0, 200));
    const json start_value = node.value("start", json(0));
    BRIOCHE_CHECK(start_value.is_number_integer() && start_value.get<int64_t>() >= 0 &&
                      start_value.get<int64_t>() <= kMaxDecoderStrip,
                  "tokenizer.json: decoder Strip start ", start_value.dump().substr(0, 40),
                  " is not an integer in [0, ", kMaxDecoderStrip, "]");
    const int start = static_cast<int>(start_value.get<int64_t>());
    out.strip_leading_spaces = std::min(out.strip_leading_spaces + start, kMaxDecoderStrip);
  } else if (type == "Metaspace") {
    const std::string replacement = node.contains("replacement")
                                        ? short_content(node["replacement"], "decoder Metaspace replacement")
                                        : std::string("\xE2\x96\x81");
    out.replacements.emplace_back(replacement, " ");
    const std::string scheme = node.value("prepend_scheme", std::string("always"));
    if (scheme != "never" && flag(node, "add_prefix_space", true))
      out.strip_leading_spaces = std::min(out.strip_leading_spaces + 1, kMaxDecoderStrip);
  } else {
    fail("tokenizer.json: decoder type '", type,
         "' is not supported (supported: Sequence, ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace)");
  }
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  size_t pos = 0;
  while ((pos = text.find(from, pos)) != std::string::npos) {
    text.replace(pos, from.size(), to);
    pos += to.size();
  }
  return text;
}

// "<0x41>" -> 0x41; -1 if not a byte token.
int byte_token_value(const std::string& text) {
  if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return -1;
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  const int hi = hex(text[3]), lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string token_name(const json& value) {  // "bos_token": "<s>" or {"content": "<s>", ...}
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    return value["content"].get<std::string>();
  return {};
}

std::unique_ptr<TokenizerImpl> load_tokenizer_json(const json& root, const std::string& config_json_text);

// parse_json_bounded turns nlohmann's parse_error into brioche::Error, but a
// number too large for a double ("1e999") leaves the parser as out_of_range.
json parse_file_json(std::string_view text, std::string_view what) {
  try {
    return parse_json_bounded(text, what);
  } catch (const json::exception& e) {
    fail(what, " is not valid JSON: ", e.what());
  }
}

}  // namespace

// nlohmann's own exceptions (a key missing, a value of the wrong type) mean
// a malformed file; they leave as brioche::Error like every other refusal.
std::unique_ptr<Tokenizer> Tokenizer::from_tokenizer_json(const std::string& json_text,
                                                          const std::string& config_json_text) {
  const json root = parse_file_json(json_text, "tokenizer.json");
  BRIOCHE_CHECK(root.is_object(), "tokenizer.json: expected a JSON object at the top, found ", root.type_name());
  try {
    return std::unique_ptr<Tokenizer>(new Tokenizer(load_tokenizer_json(root, config_json_text)));
  } catch (const json::exception& e) {
    fail("tokenizer.json: unexpected structure: ", e.what());
  }
}

namespace {

std::unique_ptr<TokenizerImpl> load_tokenizer_json(const json& root, const std::string& config_json_text) {
  auto impl = std::make_unique<TokenizerImpl>();
  const json& model = root.at("model");
  const std::string model_type = model.value("type", std::string("BPE"));
  BRIOCHE_CHECK(model_type == "BPE", "tokenizer.json: model type '", model_type, "' is not supported (supported: BPE)");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(affix);
    BRIOCHE_CHECK(it == model.end() || it->is_null() || it->get<std::string>().empty(), "tokenizer.json: BPE ", affix,
                  " '", it->dump(), "' is not supported");
  }
  BRIOCHE_CHECK(!model.contains("dropout") || model["dropout"].is_null(),
                "tokenizer.json: BPE dropout is not supported (found ", model["dropout"].dump(), ")");

  // Vocabulary: the model's, then added tokens (which may extend it).
  const json& vocab = model.at("vocab");
  BRIOCHE_CHECK(vocab.is_object(), "tokenizer.json: model.vocab: expected an object of token -> id, found ",
                vocab.type_name());
  const json added = root.value("added_tokens", json::array());
  BRIOCHE_CHECK(added.is_array(), "tokenizer.json: added_tokens: expected an array, found ", added.type_name());
  // Ids may leave a few holes, not a mostly empty table.
  const int64_t id_limit = std::min<int64_t>(kMaxVocabSize, 2 * int64_t(vocab.size() + added.size()) + 1024);
  int64_t size = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    size = std::max<int64_t>(size, token_id_of(it.value(), "model.vocab", id_limit) + 1);
  for (const json& t : added) size = std::max<int64_t>(size, token_id_of(t.at("id"), "added_tokens", id_limit) + 1);
  impl->token_texts.assign(size, std::string());
  impl->special.assign(size, 0);
  StringToId vocab_ids;
  vocab_ids.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = it.value().get<int32_t>();
    impl->token_texts[id] = it.key();
    vocab_ids.emplace(it.key(), id);
  }
  std::vector<bool> is_added(size, false);
  for (const json& t : added) {
    AddedToken token;
    token.content = string_of(t.at("content"), "added_tokens content");
    token.id = t.at("id").get<int32_t>();
    token.special = flag(t, "special", false);
    token.lstrip = flag(t, "lstrip", false);
    token.rstrip = flag(t, "rstrip", false);
    token.single_word = flag(t, "single_word", false);
    token.normalized = flag(t, "normalized", !token.special);
    impl->token_texts[token.id] = token.content;
    impl->special[token.id] = token.special;
    is_added[token.id] = true;
    impl->added_tokens.push_back(std::move(token));
  }

  read_normalizer(root.value("normalizer", json()), impl->normalizer);
  const bool byte_level_pre = read_pre_tokenizer(root.value("pre_tokenizer", json()), impl->pre_tokenizer);
  DecoderSteps decoder;
  read_decoder(root.value("decoder", json()), decoder);
  const bool byte_level = byte_level_pre || decoder.byte_level;
  impl->decoder.strip_leading_spaces = decoder.strip_leading_spaces;

  // Decoded bytes of every token.
  impl->token_bytes.resize(size);
  for (int64_t id = 0; id < size; ++id) {
    const std::string& text = impl->token_texts[id];
    if (decoder.byte_level) {
      auto bytes = byte_level_decode(text);
      impl->token_bytes[id] = bytes ? *bytes : text;
      continue;
    }
    const int byte = decoder.byte_fallback && !is_added[id] ? byte_token_value(text) : -1;
    if (byte >= 0) {
      impl->token_bytes[id] = std::string(1, static_cast<char>(byte));
      continue;
    }
    std::string bytes = text;
    for (const auto& [from, to] : decoder.replacements) bytes = replace_all(std::move(bytes), from, to);
    impl->token_bytes[id] = std::move(bytes);
  }

  // BPE keys (raw bytes for byte-level vocabularies) and merges.
  BpeModelConfig config;
  config.byte_level = byte_level;
  config.byte_fallback = flag(model, "byte_fallback", false);
  config.ignore_merges = flag(model, "ignore_merges", false);
  config.fuse_unk = flag(model, "fuse_unk", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = vocab_ids.find(model["unk_token"].get<std::string>());
    BRIOCHE_CHECK(it != vocab_ids.end(), "tokenizer.json: unk_token ", model["unk_token"].dump(),
                  " is not in the vocabulary");
    config.unk_id = it->second;
  }
  std::vector<std::string> keys(size);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = it.value().get<int32_t>();
    if (byte_level) {
      auto bytes = byte_level_decode(it.key());
      keys[id] = bytes ? *bytes : it.key();
    } else {
      keys[id] = it.key();
    }
  }
  std::vector<BpeMerge> merges;
  const json& merge_list = model.at("merges");
  BRIOCHE_CHECK(merge_list.is_array(), "tokenizer.json: model.merges: expected an array, found ",
                merge_list.type_name());
  merges.reserve(merge_list.size());
  auto lookup = [&](const std::string& piece, size_t index) {
    auto it = vocab_ids.find(piece);
    BRIOCHE_CHECK(it != vocab_ids.end(), "tokenizer.json: merge ", index, ": piece '", piece,
                  "' is not in the vocabulary");
    return it->second;
  };
  std::string left, right;
  for (size_t i = 0; i < merge_list.size(); ++i) {
    const json& m = merge_list[i];
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      BRIOCHE_CHECK(space != std::string::npos, "tokenizer.json: merge ", i, ": expected \"left right\", found '", s,
                    "'");
      left.assign(s, 0, space);
      right.assign(s, space + 1);
    } else {
      BRIOCHE_CHECK(m.is_array() && m.size() == 2, "tokenizer.json: merge ", i, ": expected a string or a pair, found ",
                    m.dump());
      left = string_of(m[0], "model.merges");
      right = string_of(m[1], "model.merges");
    }
    merges.push_back(BpeMerge{lookup(left, i), lookup(right, i), lookup(left + right, i)});
  }
  impl->model = std::make_unique<BpeModel>(std::move(keys), merges, config);

  // bos / eos / add_bos: tokenizer_config.json, else the post-processor template.
  auto id_of = [&](const std::string& name) -> int32_t {
    for (const AddedToken& t : impl->added_tokens)
      if (t.content == name) return t.id;
    auto it = vocab_ids.find(name);
    return it == vocab_ids.end() ? -1 : it->second;
  };
  const json post = root.value("post_processor", json());
  std::vector<const json*> processors;
  if (!post.is_null()) {
    if (post.value("type", std::string()) == "Sequence")
      for (const json& p : post.at("processors")) processors.push_back(&p);
    else
      processors.push_back(&post);
  }
  for (const json* p : processors) {
    if (!p->is_object() || p->value("type", std::string()) != "TemplateProcessing") continue;
    const json& single = p->at("single");
    if (single.is_array() && !single.empty() && single[0].is_object() && single[0].contains("SpecialToken")) {
      impl->bos_id = id_of(string_of(single[0]["SpecialToken"].at("id"), "post_processor SpecialToken id"));
      impl->add_bos = impl->bos_id >= 0;
    }
  }
  if (!config_json_text.empty()) {
    json cfg = parse_file_json(config_json_text, "tokenizer_config.json");
    BRIOCHE_CHECK(cfg.is_object(), "tokenizer_config.json: expected a JSON object at the top, found ", cfg.type_name());
    if (cfg.contains("bos_token")) {
      const std::string name = token_name(cfg["bos_token"]);
      if (!name.empty()) impl->bos_id = id_of(name);
    }
    if (cfg.contains("eos_token")) {
      const std::string name = token_name(cfg["eos_token"]);
      if (!name.empty()) impl->eos_id = id_of(name);
    }
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
      impl->add_bos = cfg["add_bos_token"].get<bool>() && impl->bos_id >= 0;
  }
  impl->finish();
  return impl;
}

}  // namespace
}  // namespace brioche::tokenizer
