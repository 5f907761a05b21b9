// Python `re` on UTF-8 text, through PCRE2 (UTF + Unicode properties): the
// IFEval reference is a set of Python regular expressions, and PCRE2 reads
// the same syntax (lookarounds, possessive quantifiers, (?i), (?#...)) with
// Unicode \w, \d, \s and \b. Iteration follows Python 3.7+: an empty match
// is allowed right after a non-empty one, never twice at one position.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace brioche::eval {

struct RegexMatch {
  size_t begin = 0, end = 0;
  // Byte ranges of the capture groups (group 0 is the whole match); a group
  // that did not take part is {npos, npos}.
  std::vector<std::pair<size_t, size_t>> groups;
  std::string_view group(std::string_view text, size_t index) const;
};

struct RegexFlags {
  bool ignore_case = false;
  bool multiline = false;
  bool verbose = false;  // re.VERBOSE (PCRE2_EXTENDED)
};

class PyRegex {
 public:
  // Throws brioche::Error naming the pattern and PCRE2's message.
  explicit PyRegex(std::string pattern, RegexFlags flags = {});
  ~PyRegex();
  PyRegex(PyRegex&&) noexcept;
  PyRegex(const PyRegex&) = delete;
  PyRegex& operator=(const PyRegex&) = delete;

  // re.search / re.match (anchored at `start`).
  bool search(std::string_view text, RegexMatch* match = nullptr, size_t start = 0) const;
  bool match(std::string_view text, RegexMatch* match = nullptr) const;
  // re.finditer.
  std::vector<RegexMatch> find_all(std::string_view text) const;
  size_t count(std::string_view text) const { return find_all(text).size(); }
  // re.split (without capture groups in the pattern).
  std::vector<std::string_view> split(std::string_view text) const;
  // re.sub with a Python replacement template (\1, \g<0>, \g<name> not supported).
  std::string sub(std::string_view text, std::string_view replacement) const;

  const std::string& pattern() const { return pattern_; }

 private:
  bool run(std::string_view text, size_t start, uint32_t options, RegexMatch* match) const;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// re.escape for a literal inside a pattern.
std::string regex_escape(std::string_view literal);

}  // namespace brioche::eval
