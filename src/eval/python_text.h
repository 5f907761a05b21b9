// Python's str semantics on UTF-8 text, as the IFEval reference (Python)
// applies them: character classes of str.isupper()/islower()/isalnum()/
// isspace(), str.lower(), strip(), split(). The reference counts and
// compares code points, not bytes; these helpers do the same.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace brioche::eval {

// One code point at text[pos] (U+FFFD for an invalid byte); advances pos.
uint32_t next_codepoint(std::string_view text, size_t& pos);
std::vector<uint32_t> codepoints(std::string_view text);
void append_utf8(std::string& out, uint32_t codepoint);

// Per code point, as Python's unicodedata-backed predicates.
bool py_char_isupper(uint32_t cp);  // Uppercase property (Lu + Other_Uppercase)
bool py_char_islower(uint32_t cp);  // Lowercase property
bool py_char_istitle(uint32_t cp);  // Lt
bool py_char_isalnum(uint32_t cp);  // what `\w` matches, less '_'
bool py_char_isalpha(uint32_t cp);
bool py_char_isdecimal(uint32_t cp);  // what `\d` matches
bool py_char_isspace(uint32_t cp);    // str.isspace / str.strip()'s whitespace
inline bool py_char_isword(uint32_t cp) { return cp == '_' || py_char_isalnum(cp); }

// str.isupper(): no lowercase or titlecase character and at least one
// uppercase one. str.islower() likewise.
bool py_isupper(std::string_view text);
bool py_islower(std::string_view text);
// str.lower() (full mappings: 'İ' becomes "i̇").
std::string py_lower(std::string_view text);
// str.strip() / str.split() with no arguments: Unicode whitespace.
std::string_view py_strip(std::string_view text);
std::string_view py_rstrip(std::string_view text);
std::vector<std::string_view> py_split(std::string_view text);
// str.strip(chars) for an ASCII set of characters.
std::string_view strip_chars(std::string_view text, std::string_view chars);
// Number of code points.
size_t py_len(std::string_view text);
// str.split(sep) for a non-empty separator.
std::vector<std::string_view> split_on(std::string_view text, std::string_view sep);
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace brioche::eval
