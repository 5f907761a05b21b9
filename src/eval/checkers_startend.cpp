// startend:* (EndChecker, QuotationChecker).
#include "eval/instruction_checker.h"
#include "eval/python_text.h"

namespace brioche::eval {

using namespace checker_args;

std::vector<CheckerRegistration> startend_checkers() {
  return {
      {"startend:end_checker",
       [](const nlohmann::json& kw) {
         // Surrounding double quotes are ignored: value.strip().strip('"').lower().
         const std::string end = py_lower(py_strip(text("startend:end_checker", kw, "end_phrase")));
         return checker_from([=](std::string_view r) {
           const std::string v = py_lower(strip_chars(py_strip(r), "\""));
           return v.size() >= end.size() && v.compare(v.size() - end.size(), end.size(), end) == 0;
         });
       }},
      {"startend:quotation",
       [](const nlohmann::json&) {
         return checker_from([](std::string_view r) {
           const std::string_view v = py_strip(r);
           return py_len(v) > 1 && v.front() == '"' && v.back() == '"';
         });
       }},
  };
}

}  // namespace brioche::eval
