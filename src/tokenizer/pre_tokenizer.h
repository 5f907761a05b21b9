// Normalizers and pre-tokenizers: the steps between raw text and the words
// BPE sees. Each is a small value type built from tokenizer.json (or from a
// GGUF's tokenizer.ggml.pre name) and applied in sequence.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/regex.h"

namespace brioche::tokenizer {

// ---- Normalizers --------------------------------------------------------

struct NormalizerStep {
  enum class Kind { Replace, Prepend, Nfc, Lowercase, Strip };
  Kind kind = Kind::Replace;
  std::string pattern{};                         // Replace: literal pattern (when regex is null)
  std::shared_ptr<Regex> regex{};                // Replace: regex pattern
  std::string content{};                         // Replace: replacement; Prepend: prefix
  bool strip_left = false, strip_right = false;  // Strip
};

class Normalizer {
 public:
  void add(NormalizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;

 private:
  std::vector<NormalizerStep> steps_;
};

// ---- Pre-tokenizers -----------------------------------------------------

// A list of words, each a byte range of `text`.
struct Words {
  std::string text;
  std::vector<std::pair<size_t, size_t>> ranges;  // [begin, end) into text
  void clear() {
    text.clear();
    ranges.clear();
  }
};

// How the matches of a Split pattern relate to the text around them.
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

enum class PrependScheme { Always, First, Never };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel, Metaspace };
  Kind kind = Kind::Split;
  // Split: regex, or literal when regex is null.
  std::shared_ptr<Regex> regex{};
  std::string literal{};
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  // ByteLevel: the mapping to the byte alphabet is implicit (BPE works on
  // raw bytes); these are the parts that change the words.
  bool add_prefix_space = false;  // also Metaspace's legacy flag
  // Metaspace
  std::string replacement{};  // usually "▁"
  PrependScheme prepend_scheme = PrependScheme::Always;
  bool split = true;
};

// The GPT-2 split pattern (ByteLevel with use_regex).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama-3's and Qwen2's split patterns (GGUF tokenizer.ggml.pre llama-bpe, qwen2).
inline constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen 3.5's (tokenizer.ggml.pre qwen35): Qwen2's with combining marks
// (\p{M}) kept inside words, as transformers' Qwen3_5Tokenizer writes it.
inline constexpr const char* kQwen35Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  void add(PreTokenizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  // Splits one normalized piece of input into words (replacing `words`).
  // `starts_input`: the piece begins the whole input (Metaspace "first").
  void run(std::string_view piece, bool starts_input, Words& words) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace brioche::tokenizer
