// punctuation:no_comma (CommaChecker): no ASCII comma anywhere (the
// full-width and ideographic commas do not count, as in the reference).
#include "eval/instruction_checker.h"

namespace brioche::eval {

std::vector<CheckerRegistration> punctuation_checkers() {
  return {
      {"punctuation:no_comma",
       [](const nlohmann::json&) {
         return checker_from([](std::string_view r) { return r.find(',') == std::string_view::npos; });
       }},
  };
}

}  // namespace brioche::eval
