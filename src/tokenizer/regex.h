// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) for
// pre-tokenizer splits and normalizer replacements.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace brioche::tokenizer {

class Regex {
 public:
  // Throws brioche::Error naming the pattern and the PCRE2 message at the offset.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [begin, end) byte ranges of all non-overlapping matches in
  // `text` (valid UTF-8), offset by `base`. Empty matches are skipped.
  void find_all(std::string_view text, size_t base, std::vector<std::pair<size_t, size_t>>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace brioche::tokenizer
