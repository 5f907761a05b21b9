// The 25 verifiable instructions of IFEval (Zhou et al. 2023), checked as
// the reference (lm-eval's lm_eval/tasks/ifeval/instructions.py, a port of
// Google's instruction_following_eval) checks them, quirks included: each
// checker's file names the reference class it mirrors.
//
//   auto checker = make_checker("punctuation:no_comma", kwargs);
//   bool followed = checker->follows(response);
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace brioche::eval {

class InstructionChecker {
 public:
  virtual ~InstructionChecker() = default;
  // check_following(value) of the reference.
  virtual bool follows(std::string_view response) const = 0;
};

using CheckerFactory = std::function<std::unique_ptr<InstructionChecker>(const nlohmann::json& kwargs)>;

// Builds the checker for an instruction id with its kwargs (the prompt row's
// kwargs entry; null and falsy values count as absent, as the reference
// drops them). Unknown ids and missing or malformed arguments throw
// brioche::Error naming the id, the argument, what was expected and found.
std::unique_ptr<InstructionChecker> make_checker(const std::string& instruction_id, const nlohmann::json& kwargs);
// All known instruction ids, sorted.
std::vector<std::string> instruction_ids();

// Argument readers for the checker families.
namespace checker_args {
int integer(const std::string& id, const nlohmann::json& kwargs, const char* name);
std::string text(const std::string& id, const nlohmann::json& kwargs, const char* name);
std::vector<std::string> texts(const std::string& id, const nlohmann::json& kwargs, const char* name);
// "less than" -> true, "at least" -> false.
bool less_than(const std::string& id, const nlohmann::json& kwargs, const char* name);
}  // namespace checker_args

// Each family file registers its checkers.
struct CheckerRegistration {
  const char* id;
  CheckerFactory make;
};
std::vector<CheckerRegistration> keyword_checkers();      // checkers_keywords.cpp
std::vector<CheckerRegistration> length_checkers();       // checkers_length.cpp
std::vector<CheckerRegistration> format_checkers();       // checkers_format.cpp
std::vector<CheckerRegistration> content_checkers();      // checkers_content.cpp
std::vector<CheckerRegistration> case_checkers();         // checkers_case.cpp
std::vector<CheckerRegistration> punctuation_checkers();  // checkers_punctuation.cpp
std::vector<CheckerRegistration> startend_checkers();     // checkers_startend.cpp
std::vector<CheckerRegistration> combination_checkers();  // checkers_combination.cpp
std::vector<CheckerRegistration> language_checkers();     // checkers_language.cpp

// A checker from a lambda.
template <typename F>
std::unique_ptr<InstructionChecker> checker_from(F follows) {
  struct Lambda final : InstructionChecker {
    explicit Lambda(F f) : f(std::move(f)) {}
    bool follows(std::string_view response) const override { return f(response); }
    F f;
  };
  return std::make_unique<Lambda>(std::move(follows));
}

// Text measures the checkers share (instructions_util.py).
size_t count_words(std::string_view text);      // runs of \w (nltk RegexpTokenizer(r"\w+"))
size_t count_sentences(std::string_view text);  // Punkt English sentences

}  // namespace brioche::eval
