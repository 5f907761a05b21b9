// length_constraints:* (NumberOfSentences, ParagraphChecker, NumberOfWords,
// ParagraphFirstWordCheck).
#include "core/error.h"
#include "eval/instruction_checker.h"
#include "eval/python_regex.h"
#include "eval/python_text.h"

namespace brioche::eval {

using namespace checker_args;

namespace {

// Paragraphs split on "***" (with one optional whitespace each side); empty
// ones are allowed only first or last.
bool paragraphs_follow(std::string_view r, size_t expected) {
  static const PyRegex divider(R"(\s?\*\*\*\s?)");
  const std::vector<std::string_view> paragraphs = divider.split(r);
  size_t n = paragraphs.size();
  for (size_t i = 0; i < paragraphs.size(); ++i) {
    if (!py_strip(paragraphs[i]).empty()) continue;
    if (i == 0 || i == paragraphs.size() - 1) {
      --n;
    } else {
      return false;
    }
  }
  return n == expected;
}

// Paragraphs split on "\n\n"; the nth (1-based, counting empty ones too,
// as the reference indexes the raw split) must start with the word.
bool nth_paragraph_follows(std::string_view r, size_t expected, size_t nth, const std::string& first_word) {
  const std::vector<std::string_view> paragraphs = split_on(r, "\n\n");
  size_t n = paragraphs.size();
  for (std::string_view p : paragraphs)
    if (py_strip(p).empty()) --n;
  if (nth > n) return false;
  const std::string_view paragraph = py_strip(paragraphs[nth - 1]);
  if (paragraph.empty()) return false;
  std::string_view word = py_strip(py_split(paragraph)[0]);
  word = word.substr(std::min(word.find_first_not_of('\''), word.size()));
  word = word.substr(std::min(word.find_first_not_of('"'), word.size()));
  std::string got;
  for (size_t pos = 0; pos < word.size();) {
    const size_t start = pos;
    const uint32_t cp = next_codepoint(word, pos);
    if (cp == '.' || cp == ',' || cp == '?' || cp == '!' || cp == '\'' || cp == '"') break;
    got += py_lower(word.substr(start, pos - start));
  }
  return n == expected && got == first_word;
}

}  // namespace

std::vector<CheckerRegistration> length_checkers() {
  return {
      {"length_constraints:number_sentences",
       [](const nlohmann::json& kw) {
         const char* id = "length_constraints:number_sentences";
         const size_t threshold = integer(id, kw, "num_sentences");
         const bool less = less_than(id, kw, "relation");
         return checker_from([=](std::string_view r) {
           const size_t n = count_sentences(r);
           return less ? n < threshold : n >= threshold;
         });
       }},
      {"length_constraints:number_paragraphs",
       [](const nlohmann::json& kw) {
         const size_t expected = integer("length_constraints:number_paragraphs", kw, "num_paragraphs");
         return checker_from([=](std::string_view r) { return paragraphs_follow(r, expected); });
       }},
      {"length_constraints:number_words",
       [](const nlohmann::json& kw) {
         const char* id = "length_constraints:number_words";
         const size_t threshold = integer(id, kw, "num_words");
         const bool less = less_than(id, kw, "relation");
         return checker_from([=](std::string_view r) {
           const size_t n = count_words(r);
           return less ? n < threshold : n >= threshold;
         });
       }},
      {"length_constraints:nth_paragraph_first_word",
       [](const nlohmann::json& kw) {
         const char* id = "length_constraints:nth_paragraph_first_word";
         const size_t expected = integer(id, kw, "num_paragraphs");
         const size_t nth = integer(id, kw, "nth_paragraph");
         if (nth == 0 || nth > expected)
           throw Error(std::string(id) + ": kwarg 'nth_paragraph': expected 1.." + std::to_string(expected) +
                       ", found " + std::to_string(nth));
         const std::string first_word = py_lower(text(id, kw, "first_word"));
         return checker_from([=](std::string_view r) { return nth_paragraph_follows(r, expected, nth, first_word); });
       }},
  };
}

}  // namespace brioche::eval
