// combination:* (TwoResponsesChecker, RepeatPromptThenAnswer).
#include "eval/instruction_checker.h"
#include "eval/python_text.h"

namespace brioche::eval {

using namespace checker_args;

namespace {

// Exactly two non-empty, different responses around "******"; an empty
// piece is allowed only first or last.
bool two_responses(std::string_view r) {
  std::vector<std::string_view> valid;
  const std::vector<std::string_view> parts = split_on(r, "******");
  for (size_t i = 0; i < parts.size(); ++i) {
    if (py_strip(parts[i]).empty()) {
      if (i != 0 && i != parts.size() - 1) return false;
    } else {
      valid.push_back(parts[i]);
    }
  }
  return valid.size() == 2 && py_strip(valid[0]) != py_strip(valid[1]);
}

}  // namespace

std::vector<CheckerRegistration> combination_checkers() {
  return {
      {"combination:two_responses", [](const nlohmann::json&) { return checker_from(two_responses); }},
      {"combination:repeat_prompt",
       [](const nlohmann::json& kw) {
         const std::string prompt = py_lower(py_strip(text("combination:repeat_prompt", kw, "prompt_to_repeat")));
         return checker_from([=](std::string_view r) { return py_lower(py_strip(r)).rfind(prompt, 0) == 0; });
       }},
  };
}

}  // namespace brioche::eval
