#include "tokenizer/hf_tokenizer_files.h"

#include "core/error.h"
#include "formats/gguf.h"
#include "tokenizer/pre_tokenizer.h"

namespace brioche::tokenizer {

namespace {

using json = nlohmann::json;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
constexpr int64_t kControl = 3, kUnknown = 2, kUserDefined = 4;

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json split(const char* pattern) {
  return {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
}

// tokenizer.json's pre_tokenizer (and normalizer) for a tokenizer.ggml.pre:
// the inverse of the table in tokenizer_gguf.cpp.
void pre_tokenizer_for(const std::string& pre, const std::string& path, json& tok) {
  tok["normalizer"] = nullptr;
  if (pre.empty() || pre == "default" || pre == "gpt2") {
    tok["pre_tokenizer"] = byte_level(true);
  } else if (pre == "smollm") {
    tok["pre_tokenizer"] = {{"type", "Sequence"},
                            {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
  } else if (pre == "llama-bpe" || pre == "llama3") {
    tok["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split(kLlama3Pattern), byte_level(false)}}};
  } else if (pre == "qwen2") {
    tok["normalizer"] = {{"type", "NFC"}};
    tok["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split(kQwen2Pattern), byte_level(false)}}};
  } else if (pre == "qwen35") {
    tok["normalizer"] = {{"type", "NFC"}};
    tok["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split(kQwen35Pattern), byte_level(false)}}};
  } else {
    fail(path, ": tokenizer.ggml.pre '", pre,
         "' has no tokenizer.json equivalent here (supported: default, gpt2, smollm, llama-bpe, qwen2, qwen35)");
  }
}

}  // namespace

HfTokenizerFiles hf_tokenizer_files(const formats::GgufFile& gguf, int max_length) {
  const std::string& path = gguf.path();
  const std::string kind = gguf.get_string("tokenizer.ggml.model", "");
  BRIOCHE_CHECK(kind == "gpt2", path, ": tokenizer.ggml.model '", kind,
                "': only byte-level BPE (gpt2) tokenizers are written as tokenizer.json; pass --tokenizer-from DIR "
                "(the original model's folder) to copy its tokenizer files");
  const std::vector<std::string>& tokens = gguf.get("tokenizer.ggml.tokens").string_list();
  std::vector<int64_t> types(tokens.size(), 1);
  if (const auto* v = gguf.find("tokenizer.ggml.token_type")) types = v->as_ints();
  BRIOCHE_CHECK(types.size() == tokens.size(), path, ": tokenizer.ggml.token_type has ", types.size(),
                " entries, expected ", tokens.size());
  const auto* merges = gguf.find("tokenizer.ggml.merges");
  BRIOCHE_CHECK(merges != nullptr, path, ": tokenizer.ggml.merges is missing (needed for model gpt2)");

  json vocab = json::object();
  json added = json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    vocab[tokens[id]] = id;
    const int64_t t = types[id];
    if (t == kControl || t == kUnknown || t == kUserDefined)
      added.push_back({{"id", id},
                       {"content", tokens[id]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", t == kUserDefined},
                       {"special", t != kUserDefined}});
  }
  auto token_of = [&](const char* key) -> json {
    const int64_t id = gguf.get_int(key, -1);
    if (id < 0 || id >= int64_t(tokens.size())) return nullptr;
    return tokens[size_t(id)];
  };
  const json bos = token_of("tokenizer.ggml.bos_token_id");
  const auto* add_bos_value = gguf.find("tokenizer.ggml.add_bos_token");
  const bool add_bos = add_bos_value != nullptr && add_bos_value->as_bool() && !bos.is_null();

  HfTokenizerFiles files;
  json& tok = files.tokenizer;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = added;
  pre_tokenizer_for(gguf.get_string("tokenizer.ggml.pre", "default"), path, tok);
  if (add_bos) {
    const int64_t bos_id = gguf.get_int("tokenizer.ggml.bos_token_id", -1);
    const json special = {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
    tok["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {special, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {special,
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          special,
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{bos.get<std::string>(), {{"id", bos}, {"ids", {bos_id}}, {"tokens", {bos}}}}}}};
  } else {
    tok["post_processor"] = byte_level(false);
  }
  tok["decoder"] = byte_level(true);
  tok["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false},
                  {"byte_fallback", false},
                  {"ignore_merges", false},
                  {"vocab", vocab},
                  {"merges", merges->string_list()}};

  json& cfg = files.tokenizer_config;
  cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
  cfg["add_bos_token"] = add_bos;
  cfg["add_eos_token"] = false;
  cfg["clean_up_tokenization_spaces"] = false;
  cfg["bos_token"] = bos;
  cfg["eos_token"] = token_of("tokenizer.ggml.eos_token_id");
  cfg["unk_token"] = token_of("tokenizer.ggml.unknown_token_id");
  cfg["pad_token"] = token_of("tokenizer.ggml.padding_token_id");
  if (max_length > 0) cfg["model_max_length"] = max_length;
  const std::string chat_template = gguf.get_string("tokenizer.chat_template", "");
  if (!chat_template.empty()) cfg["chat_template"] = chat_template;
  return files;
}

}  // namespace brioche::tokenizer
