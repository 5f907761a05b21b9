// detectable_format:* (BulletListChecker, ConstrainedResponseChecker,
// HighlightSectionChecker, SectionChecker, JsonFormat, TitleChecker).
#include "eval/instruction_checker.h"
#include "eval/json_syntax.h"
#include "eval/python_regex.h"
#include "eval/python_text.h"

namespace brioche::eval {

using namespace checker_args;

namespace {

// Lines starting with "* " style or "-" bullets (the reference's two
// MULTILINE patterns; `\s*` may reach over blank lines, `[^*]` over "\n").
size_t count_bullets(std::string_view r) {
  static const PyRegex star(R"(^\s*\*[^\*].*$)", {.multiline = true});
  static const PyRegex dash(R"(^\s*-.*$)", {.multiline = true});
  return star.count(r) + dash.count(r);
}

// *text* and **text** spans on one line with something besides spaces in them.
size_t count_highlights(std::string_view r) {
  static const PyRegex single(R"(\*[^\n\*]*\*)");
  static const PyRegex double_star(R"(\*\*[^\n\*]*\*\*)");
  size_t n = 0;
  for (const RegexMatch& m : single.find_all(r))
    if (!py_strip(strip_chars(r.substr(m.begin, m.end - m.begin), "*")).empty()) ++n;
  for (const RegexMatch& m : double_star.find_all(r))
    if (!py_strip(r.substr(m.begin + 2, m.end - m.begin - 4)).empty()) ++n;
  return n;
}

// The response, less markdown fences, parses as JSON (Python's json.loads).
bool is_json(std::string_view r) {
  std::string_view v = py_strip(r);
  for (std::string_view fence : {"```json", "```Json", "```JSON", "```"}) {
    if (v.substr(0, fence.size()) == fence) v.remove_prefix(fence.size());  // a chain of removeprefix calls
  }
  if (v.size() >= 3 && v.substr(v.size() - 3) == "```") v.remove_suffix(3);
  return python_json_loads_ok(py_strip(v));
}

bool has_title(std::string_view r) {
  static const PyRegex title(R"(<<[^\n]+>>)");
  for (const RegexMatch& m : title.find_all(r)) {
    std::string_view t = r.substr(m.begin, m.end - m.begin);
    t = t.substr(std::min(t.find_first_not_of('<'), t.size()));
    const size_t last = t.find_last_not_of('>');
    t = last == std::string_view::npos ? std::string_view{} : t.substr(0, last + 1);
    if (!py_strip(t).empty()) return true;
  }
  return false;
}

}  // namespace

std::vector<CheckerRegistration> format_checkers() {
  return {
      {"detectable_format:number_bullet_lists",
       [](const nlohmann::json& kw) {
         const size_t expected = integer("detectable_format:number_bullet_lists", kw, "num_bullets");
         return checker_from([=](std::string_view r) { return count_bullets(r) == expected; });
       }},
      {"detectable_format:constrained_response",
       [](const nlohmann::json&) {
         return checker_from([](std::string_view r) {
           const std::string_view v = py_strip(r);
           for (std::string_view option : {"My answer is yes.", "My answer is no.", "My answer is maybe."})
             if (v.find(option) != std::string_view::npos) return true;
           return false;
         });
       }},
      {"detectable_format:number_highlighted_sections",
       [](const nlohmann::json& kw) {
         const size_t expected = integer("detectable_format:number_highlighted_sections", kw, "num_highlights");
         return checker_from([=](std::string_view r) { return count_highlights(r) >= expected; });
       }},
      {"detectable_format:multiple_sections",
       [](const nlohmann::json& kw) {
         const char* id = "detectable_format:multiple_sections";
         const std::string splitter(py_strip(text(id, kw, "section_spliter")));
         const size_t expected = integer(id, kw, "num_sections");
         auto pattern = std::make_shared<PyRegex>(R"(\s?)" + splitter + R"(\s?\d+\s?)");
         return checker_from([=](std::string_view r) { return pattern->split(r).size() - 1 >= expected; });
       }},
      {"detectable_format:json_format", [](const nlohmann::json&) { return checker_from(is_json); }},
      {"detectable_format:title", [](const nlohmann::json&) { return checker_from(has_title); }},
  };
}

}  // namespace brioche::eval
