// keywords:* (KeywordChecker, KeywordFrequencyChecker, ForbiddenWords,
// LetterFrequencyChecker). The reference passes keywords to `re` unescaped,
// case-insensitive; so does this.
#include <algorithm>

#include "core/error.h"
#include "eval/instruction_checker.h"
#include "eval/python_regex.h"
#include "eval/python_text.h"

namespace brioche::eval {

using namespace checker_args;

std::vector<CheckerRegistration> keyword_checkers() {
  return {
      {"keywords:existence",
       [](const nlohmann::json& kw) {
         std::vector<PyRegex> patterns;
         for (const std::string& k : texts("keywords:existence", kw, "keywords"))
           patterns.emplace_back(k, RegexFlags{.ignore_case = true});
         return checker_from(
             [patterns = std::make_shared<std::vector<PyRegex>>(std::move(patterns))](std::string_view r) {
               return std::all_of(patterns->begin(), patterns->end(), [&](const PyRegex& p) { return p.search(r); });
             });
       }},
      {"keywords:frequency",
       [](const nlohmann::json& kw) {
         const char* id = "keywords:frequency";
         auto pattern =
             std::make_shared<PyRegex>(std::string(py_strip(text(id, kw, "keyword"))), RegexFlags{.ignore_case = true});
         const size_t frequency = integer(id, kw, "frequency");
         const bool less = less_than(id, kw, "relation");
         return checker_from([=](std::string_view r) {
           const size_t n = pattern->count(r);
           return less ? n < frequency : n >= frequency;
         });
       }},
      {"keywords:forbidden_words",
       [](const nlohmann::json& kw) {
         std::vector<PyRegex> patterns;
         for (const std::string& w : texts("keywords:forbidden_words", kw, "forbidden_words"))
           patterns.emplace_back("\\b" + w + "\\b", RegexFlags{.ignore_case = true});
         return checker_from(
             [patterns = std::make_shared<std::vector<PyRegex>>(std::move(patterns))](std::string_view r) {
               return std::none_of(patterns->begin(), patterns->end(), [&](const PyRegex& p) { return p.search(r); });
             });
       }},
      {"keywords:letter_frequency",
       [](const nlohmann::json& kw) {
         const char* id = "keywords:letter_frequency";
         // The reference takes a random ASCII letter instead of a letter
         // outside a-z (two prompts ask for '#' and '!'); brioche counts the
         // character the prompt asks for (docs/eval.md).
         const std::string letter = py_lower(text(id, kw, "letter"));
         if (py_len(letter) != 1)
           throw Error(std::string(id) + ": kwarg 'letter': expected one character, found \"" + letter + "\"");
         const size_t frequency = integer(id, kw, "let_frequency");
         const bool less = less_than(id, kw, "let_relation");
         return checker_from([=](std::string_view r) {
           const std::string lower = py_lower(r);
           size_t n = 0;
           for (size_t at = lower.find(letter); at != std::string::npos; at = lower.find(letter, at + letter.size()))
             ++n;
           return less ? n < frequency : n >= frequency;
         });
       }},
  };
}

}  // namespace brioche::eval
