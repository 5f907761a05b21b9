// change_case:* (CapitalWordFrequencyChecker, CapitalLettersEnglishChecker,
// LowercaseLettersEnglishChecker). Words are nltk.word_tokenize tokens;
// "English" is langdetect's verdict, and text langdetect cannot classify
// (no letters) passes, as in the reference.
#include "eval/instruction_checker.h"
#include "eval/language_detect.h"
#include "eval/punkt.h"
#include "eval/python_text.h"

namespace brioche::eval {

using namespace checker_args;

namespace {

bool english_or_undetectable(std::string_view r) {
  const std::optional<std::string> lang = detect_language(r);
  return !lang || *lang == "en";
}

}  // namespace

std::vector<CheckerRegistration> case_checkers() {
  return {
      {"change_case:capital_word_frequency",
       [](const nlohmann::json& kw) {
         const char* id = "change_case:capital_word_frequency";
         const size_t frequency = integer(id, kw, "capital_frequency");
         const bool less = less_than(id, kw, "capital_relation");
         return checker_from([=](std::string_view r) {
           size_t n = 0;
           for (const std::string& w : nltk_word_tokenize(r))
             if (py_isupper(w)) ++n;
           return less ? n < frequency : n >= frequency;
         });
       }},
      {"change_case:english_capital",
       [](const nlohmann::json&) {
         return checker_from([](std::string_view r) { return py_isupper(r) && english_or_undetectable(r); });
       }},
      {"change_case:english_lowercase",
       [](const nlohmann::json&) {
         return checker_from([](std::string_view r) { return py_islower(r) && english_or_undetectable(r); });
       }},
  };
}

}  // namespace brioche::eval
