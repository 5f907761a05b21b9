// detectable_content:* (PlaceholderChecker, PostscriptChecker).
#include "eval/instruction_checker.h"
#include "eval/python_regex.h"
#include "eval/python_text.h"

namespace brioche::eval {

using namespace checker_args;

std::vector<CheckerRegistration> content_checkers() {
  return {
      {"detectable_content:number_placeholders",
       [](const nlohmann::json& kw) {
         const size_t expected = integer("detectable_content:number_placeholders", kw, "num_placeholders");
         return checker_from([=](std::string_view r) {
           static const PyRegex placeholder(R"(\[.*?\])");
           return placeholder.count(r) >= expected;
         });
       }},
      {"detectable_content:postscript",
       [](const nlohmann::json& kw) {
         // The two markers of the data set get patterns that allow spaces
         // ("P. S."); any other marker is used as a (lowercased) pattern.
         const std::string marker(py_strip(text("detectable_content:postscript", kw, "postscript_marker")));
         std::string pattern;
         if (marker == "P.P.S") {
           pattern = R"(\s*p\.\s?p\.\s?s.*$)";
         } else if (marker == "P.S.") {
           pattern = R"(\s*p\.\s?s\..*$)";
         } else {
           pattern = R"(\s*)" + py_lower(marker) + R"(.*$)";
         }
         auto re = std::make_shared<PyRegex>(pattern, RegexFlags{.multiline = true});
         return checker_from([=](std::string_view r) { return re->search(py_lower(r)); });
       }},
  };
}

}  // namespace brioche::eval
