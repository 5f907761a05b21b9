// Python str operations on UTF-8 text (by code point), shared by filters and
// string methods. Case mapping covers ASCII and Latin-1/Latin Extended-A
// letters that have simple one-to-one mappings; other characters keep their case.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace brioche::tmpl {

bool py_isspace(char32_t c);
// str.strip/lstrip/rstrip; chars == nullopt strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / str.rsplit; sep == nullopt splits on whitespace runs.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                                  bool from_right);
std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement, int64_t count);
std::vector<std::string> py_splitlines(std::string_view s);
int64_t py_count(std::string_view s, std::string_view sub);
int64_t py_find(std::string_view s, std::string_view sub, bool from_right);  // code point index or -1

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);  // str.capitalize
std::string py_title(std::string_view s);       // str.title
std::string jinja_title(std::string_view s);    // Jinja's |title filter (words split on spaces, - ( { [ <)
bool py_islower(std::string_view s);
bool py_isupper(std::string_view s);
std::string html_escape(std::string_view s);  // markupsafe.escape

}  // namespace brioche::tmpl
