// Loader for the tokenizer.ggml.* keys of a GGUF file.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "formats/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace brioche::tokenizer {
namespace {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum GgufTokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// The pre-tokenizer that tokenizer.ggml.pre names (as in the Hugging Face
// tokenizer.json the GGUF was converted from).
void byte_level_pre_tokenizer(const std::string& pre, TokenizerImpl& impl) {
  auto split = [&](const char* pattern) {
    impl.pre_tokenizer.add({.kind = PreTokenizerStep::Kind::Split, .regex = std::make_shared<Regex>(pattern)});
  };
  PreTokenizerStep byte_level{.kind = PreTokenizerStep::Kind::ByteLevel};
  if (pre.empty() || pre == "default" || pre == "gpt2") {
    byte_level.regex = std::make_shared<Regex>(kGpt2Pattern);
  } else if (pre == "smollm") {
    split("\\p{N}");  // Digits(individual_digits = true)
    byte_level.regex = std::make_shared<Regex>(kGpt2Pattern);
  } else if (pre == "llama-bpe" || pre == "llama3") {
    split(kLlama3Pattern);
  } else if (pre == "qwen2") {
    impl.normalizer.add({.kind = NormalizerStep::Kind::Nfc});
    split(kQwen2Pattern);
  } else if (pre == "qwen35") {
    impl.normalizer.add({.kind = NormalizerStep::Kind::Nfc});
    split(kQwen35Pattern);
  } else {
    fail("GGUF tokenizer.ggml.pre '", pre,
         "' is not supported (supported: default, gpt2, smollm, llama-bpe, qwen2, qwen35)");
  }
  impl.pre_tokenizer.add(std::move(byte_level));
}

int byte_token_value(const std::string& text) {
  if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// SentencePiece merges are every split of every piece into two pieces: a
// piece of L bytes costs L hash lookups of up to L bytes. Pieces longer than
// this (real vocabularies stay under 100 bytes) are only taken whole, so a
// hostile vocabulary of huge pieces cannot make loading quadratic.
constexpr size_t kMaxMergedPieceBytes = 256;

// A special-token id from the metadata: -1 (none) or an index into the vocabulary.
int32_t optional_token_id(const formats::GgufFile& gguf, const char* key, size_t vocab_size) {
  const int64_t id = gguf.get_int(key, -1);
  BRIOCHE_CHECK(id >= -1 && id < static_cast<int64_t>(vocab_size), gguf.path(), ": ", key, " = ", id,
                " is not a token id (the vocabulary has ", vocab_size, " tokens)");
  return static_cast<int32_t>(id);
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const formats::GgufFile& gguf) {
  const std::string kind = gguf.get_string("tokenizer.ggml.model", "");
  BRIOCHE_CHECK(kind == "gpt2" || kind == "llama" || kind == "gemma4", gguf.path(), ": tokenizer.ggml.model '", kind,
                "' is not supported (supported: gpt2, llama, gemma4)");
  auto impl = std::make_unique<TokenizerImpl>();
  const std::vector<std::string>& texts = gguf.get("tokenizer.ggml.tokens").string_list();
  const size_t n = texts.size();
  BRIOCHE_CHECK(n <= (size_t{1} << 22), gguf.path(), ": tokenizer.ggml.tokens has ", n,
                " entries; the limit is 4194304 (vocabularies today reach 262,144)");
  std::vector<int64_t> types(n, kNormal);
  if (const auto* v = gguf.find("tokenizer.ggml.token_type")) {
    types = v->as_ints();
    BRIOCHE_CHECK(types.size() == n, gguf.path(), ": tokenizer.ggml.token_type has ", types.size(),
                  " entries, expected ", n, " (one per token)");
  }
  impl->token_texts = texts;
  impl->special.assign(n, 0);
  impl->token_bytes.resize(n);
  std::vector<std::string> keys(n);
  StringToId ids;
  ids.reserve(n);
  for (size_t id = 0; id < n; ++id) ids.emplace(texts[id], static_cast<int32_t>(id));

  const bool byte_level = kind == "gpt2";
  for (size_t id = 0; id < n; ++id) {
    const std::string& text = texts[id];
    const int64_t type = types[id];
    // Control, unknown and user-defined tokens are matched in text (as llama.cpp
    // and Hugging Face's added tokens do); the first two are special.
    if (type == kControl || type == kUnknown || type == kUserDefined) {
      const bool special = type != kUserDefined;
      impl->added_tokens.push_back(AddedToken{.content = text, .id = static_cast<int32_t>(id), .special = special});
      impl->special[id] = special;
    }
    if (byte_level) {
      auto bytes = byte_level_decode(text);
      keys[id] = bytes ? *bytes : text;
      impl->token_bytes[id] = keys[id];
    } else if (type == kByte && byte_token_value(text) >= 0) {
      impl->token_bytes[id] = std::string(1, static_cast<char>(byte_token_value(text)));
      keys[id] = text;
    } else {
      std::string bytes = text;
      for (size_t pos = 0; (pos = bytes.find("\xE2\x96\x81", pos)) != std::string::npos;) bytes.replace(pos, 3, " ");
      impl->token_bytes[id] = std::move(bytes);
      if (type == kNormal || type == kUserDefined || type == kUnused || type == 0) keys[id] = text;
    }
  }

  BpeModelConfig config;
  config.byte_level = byte_level;
  // SentencePiece-style text (llama, gemma4): spaces become U+2581 before
  // BPE, which falls back to <0xXX> byte tokens.
  auto sentencepiece_text = [&] {
    config.byte_fallback = true;
    config.unk_id = optional_token_id(gguf, "tokenizer.ggml.unknown_token_id", n);
    const bool add_space_prefix =
        gguf.find("tokenizer.ggml.add_space_prefix") ? gguf.get("tokenizer.ggml.add_space_prefix").as_bool() : true;
    if (add_space_prefix) impl->normalizer.add({.kind = NormalizerStep::Kind::Prepend, .content = "\xE2\x96\x81"});
    impl->normalizer.add({.kind = NormalizerStep::Kind::Replace, .pattern = " ", .content = "\xE2\x96\x81"});
    impl->decoder.strip_leading_spaces = add_space_prefix ? 1 : 0;
  };
  std::vector<BpeMerge> merges;
  // gpt2 and gemma4 list their merges; llama's come from the scores.
  if (byte_level || kind == "gemma4") {
    const auto* merge_value = gguf.find("tokenizer.ggml.merges");
    BRIOCHE_CHECK(merge_value, gguf.path(), ": tokenizer.ggml.merges is missing (needed for model ", kind, ")");
    const std::vector<std::string>& list = merge_value->string_list();
    merges.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string& s = list[i];
      const size_t space = s.find(' ');
      BRIOCHE_CHECK(space != std::string::npos, gguf.path(), ": tokenizer.ggml.merges[", i,
                    "]: expected \"left right\", found '", s, "'");
      auto find = [&](const std::string& piece) {
        auto it = ids.find(piece);
        BRIOCHE_CHECK(it != ids.end(), gguf.path(), ": tokenizer.ggml.merges[", i, "]: piece '", piece,
                      "' is not a token");
        return it->second;
      };
      const std::string left = s.substr(0, space), right = s.substr(space + 1);
      merges.push_back(BpeMerge{find(left), find(right), find(left + right)});
    }
    if (byte_level)
      byte_level_pre_tokenizer(gguf.get_string("tokenizer.ggml.pre", "default"), *impl);
    else
      // Gemma's tokenizer.json: Replace(" ", U+2581), then its Split on " "
      // finds no space left: BPE runs over the whole text (no pre-tokenizer).
      sentencepiece_text();
  } else {
    // SentencePiece BPE: merging two pieces is allowed when their
    // concatenation is a piece; higher score merges first. Every split of
    // every normal piece into two pieces is a merge ranked by that score.
    const auto* score_value = gguf.find("tokenizer.ggml.scores");
    BRIOCHE_CHECK(score_value, gguf.path(), ": tokenizer.ggml.scores is missing (needed for model llama)");
    std::vector<float> scores = score_value->as_floats();
    for (float& score : scores)
      if (std::isnan(score)) score = -INFINITY;  // NaN would break the sort's ordering
    BRIOCHE_CHECK(scores.size() == n, gguf.path(), ": tokenizer.ggml.scores has ", scores.size(), " entries, expected ",
                  n);
    std::vector<int32_t> by_score(n);
    std::iota(by_score.begin(), by_score.end(), 0);
    std::stable_sort(by_score.begin(), by_score.end(), [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
    int32_t rank = 0;
    for (int32_t id : by_score) {
      const std::string& key = keys[id];
      if (key.empty() || types[id] != kNormal || key.size() > kMaxMergedPieceBytes) continue;
      bool any = false;
      size_t pos = 0;
      next_codepoint(key, pos);
      for (; pos < key.size(); next_codepoint(key, pos)) {
        auto left = ids.find(std::string_view(key).substr(0, pos));
        auto right = ids.find(std::string_view(key).substr(pos));
        if (left == ids.end() || right == ids.end() || keys[left->second].empty() || keys[right->second].empty())
          continue;
        merges.push_back(BpeMerge{left->second, right->second, id, rank});
        any = true;
      }
      rank += any;
    }
    sentencepiece_text();
  }
  // Merges from scores come sorted by rank already; give each its rank.
  impl->model = std::make_unique<BpeModel>(std::move(keys), merges, config);

  impl->bos_id = optional_token_id(gguf, "tokenizer.ggml.bos_token_id", n);
  impl->eos_id = optional_token_id(gguf, "tokenizer.ggml.eos_token_id", n);
  const auto* add_bos = gguf.find("tokenizer.ggml.add_bos_token");
  impl->add_bos = (add_bos ? add_bos->as_bool() : kind == "llama") && impl->bos_id >= 0;
  impl->finish();
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int32_t id = optional_token_id(gguf, key, n);
    if (id >= 0 && std::find(impl->eos_ids.begin(), impl->eos_ids.end(), id) == impl->eos_ids.end())
      impl->eos_ids.push_back(static_cast<int32_t>(id));
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

}  // namespace brioche::tokenizer
