// JSON Schema strings: pattern (a search), format, minLength/maxLength.

#include <algorithm>

#include "grammar/schema_converter.h"
#include "grammar/utf8.h"

namespace brioche::grammar::schema {
namespace {

// The formats JSON Schema 2020-12 defines (section 7.3 of its validation
// vocabulary); draft-04's and OpenAPI's extras are not among them.
bool format_is_defined(const std::string& f) {
  static const std::set<std::string> kDefined = {
      "date-time", "date",          "time",          "duration",      "email",         "idn-email",
      "hostname",  "idn-hostname",  "ipv4",          "ipv6",          "uri",           "uri-reference",
      "iri",       "iri-reference", "uuid",          "uri-template",  "json-pointer",  "relative-json-pointer",
      "regex"};
  return kDefined.count(f) > 0;
}

}  // namespace

// pattern + minLength/maxLength, exact when the pattern is one repeated
// atom (a class, an escape like \d, '.', or a literal character:
// `^[a-z]+$`, `\d{3,}`): each repetition is one character, so the length
// bounds intersect the repetition bounds. Other patterns: a named error.
// JSON Schema's `pattern` is an ECMA-262 search, not a full match: an end
// the pattern does not anchor (^, $) may hold any characters. (^https?://
// admits "https://example.com", not only the prefix itself.) The
// length-bounded form above keeps full-match semantics, and so does a
// top-level alternation anchored at one end only (^a|b): both admit a
// subset of the valid strings, never an invalid one.
std::string SchemaConverter::search_pattern(const std::string& p) {
  const bool at_start = !p.empty() && p.front() == '^';
  size_t backslashes = 0;  // before the last character: an odd run makes a final '$' a literal
  while (backslashes + 1 < p.size() && p[p.size() - 2 - backslashes] == '\\') ++backslashes;
  const bool at_end = p.size() > (at_start ? 1u : 0u) && p.back() == '$' && backslashes % 2 == 0;
  if (at_start && at_end) return p;
  std::string body = p.substr(at_start ? 1 : 0, p.size() - (at_start ? 1 : 0) - (at_end ? 1 : 0));
  return std::string("^") + (at_start ? "" : "[\\s\\S]*") + "(?:" + body + ")" + (at_end ? "" : "[\\s\\S]*") + "$";
}

std::string SchemaConverter::length_bounded_pattern(const std::string& pattern, int64_t lo, int64_t hi, const std::string& ptr) {
  auto fail_combination = [&] {
    unsupported(hi >= 0 ? "maxLength" : "minLength", ptr,
                "pattern combined with minLength/maxLength is implemented only for one repeated class or character "
                "(like ^[a-z0-9_]+$); found '" + pattern + "'");
  };
  std::string p = pattern;
  if (!p.empty() && p.front() == '^') p.erase(0, 1);
  if (p.size() >= 2 && p.back() == '$' && p[p.size() - 2] != '\\') p.pop_back();
  if (p.empty()) fail_combination();
  size_t end = 0;  // one past the atom
  if (p[0] == '[') {
    size_t i = 1;
    if (i < p.size() && p[i] == '^') ++i;
    if (i < p.size() && p[i] == ']') fail_combination();
    for (; i < p.size() && p[i] != ']'; ++i) {
      if (p[i] == '[') fail_combination();
      if (p[i] == '\\') ++i;
    }
    if (i >= p.size()) fail_combination();
    end = i + 1;
  } else if (p[0] == '\\') {
    if (p.size() < 2 || std::string("dDwWsS.-\\/[](){}*+?^$|").find(p[1]) == std::string::npos) fail_combination();
    end = 2;
  } else if (std::string("()|*+?{").find(p[0]) != std::string::npos) {
    fail_combination();
  } else {
    uint32_t cp;
    end = decode_utf8(p, 0, &cp);
    if (end == 0) fail_combination();
  }
  const std::string atom = p.substr(0, end), quant = p.substr(end);
  int64_t a = 1, b = 1;  // repetitions of the atom, b < 0: unbounded
  if (quant == "*") a = 0, b = -1;
  else if (quant == "+") a = 1, b = -1;
  else if (quant == "?") a = 0, b = 1;
  else if (!quant.empty()) {
    if (quant.front() != '{' || quant.back() != '}') fail_combination();
    const std::string inner = quant.substr(1, quant.size() - 2);
    const size_t comma = inner.find(',');
    auto number = [&](const std::string& t) -> int64_t {
      if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos) fail_combination();
      return std::stoll(t);
    };
    a = number(comma == std::string::npos ? inner : inner.substr(0, comma));
    b = comma == std::string::npos ? a : comma + 1 == inner.size() ? -1 : number(inner.substr(comma + 1));
  }
  const int64_t from = std::max(a, lo);
  const int64_t to = b < 0 ? hi : hi < 0 ? b : std::min(b, hi);
  if (to >= 0 && to < from)
    unsupported(hi >= 0 ? "maxLength" : "minLength", ptr,
                "no string matches pattern '" + pattern + "' within the length bounds");
  if (from > 10000 || to > 10000) unsupported("maxLength", ptr, "length bounds above 10000");
  return "^" + atom + "{" + std::to_string(from) + "," + (to >= 0 ? std::to_string(to) : "") + "}$";
}

std::string SchemaConverter::visit_string(const Json& s, const std::string& ptr, const std::string& hint) {
  // A format JSON Schema does not define (OpenAPI's int32, int64, byte,
  // double; Kubernetes' int-or-string; private ones) asserts nothing:
  // validators ignore it, and so does the grammar. A defined format the
  // grammar does not write is refused, not ignored: validators check it.
  if (s.contains("format") && s["format"].is_string() && !format_is_defined(s["format"].get<std::string>()) &&
      format_ebnf(s["format"].get<std::string>()).empty()) {
    Json rest = s;
    rest.erase("format");
    return visit_string(rest, ptr, hint);
  }
  if (s.contains("format")) {
    std::string f = s["format"].get<std::string>();
    std::string body = format_ebnf(f);
    if (body.empty())
      unsupported("format", ptr, "expected one of " + supported_formats() + ", found '" + f + "'");
    if (s.contains("pattern")) unsupported("pattern", ptr, "expected either format or pattern on one string, found both");
    if (s.contains("minLength") || s.contains("maxLength")) {
      // Exact only for formats of one fixed length: the bounds either
      // admit it (and add nothing) or admit no string.
      const int64_t fixed = f == "uuid" ? 36 : f == "date" ? 10 : -1;
      const char* which = s.contains("maxLength") ? "maxLength" : "minLength";
      if (fixed < 0)
        unsupported(which, ptr, "format '" + f + "' combined with minLength/maxLength (its strings vary in length)");
      if (count_of(s, "minLength", ptr, 0) > fixed || (s.contains("maxLength") && count_of(s, "maxLength", ptr, 0) < fixed))
        unsupported(which, ptr, "format '" + f + "' strings have " + std::to_string(fixed) + " characters; none fits");
    }
    return string_rule(hint + "_" + sanitize(f), "(" + body + ")");
  }
  if (s.contains("pattern")) {
    std::string pattern = s["pattern"].get<std::string>();
    if (s.contains("minLength") || s.contains("maxLength")) {
      int64_t lo = count_of(s, "minLength", ptr, 0), hi = count_of(s, "maxLength", ptr, -1);
      if (lo < 0 || (hi >= 0 && hi < lo)) unsupported("minLength", ptr, "expected 0 <= minLength <= maxLength");
      pattern = length_bounded_pattern(pattern, lo, hi, ptr);
    } else {
      pattern = search_pattern(pattern);
    }
    std::string body;
    try {
      body = regex_to_ebnf_expr(pattern, /*inside_json_string=*/true);
    } catch (const Error& e) {
      unsupported("pattern", ptr, e.what());
    }
    return string_rule(hint + "_pattern", body);
  }
  if (s.contains("minLength") || s.contains("maxLength")) {
    int64_t lo = count_of(s, "minLength", ptr, 0), hi = count_of(s, "maxLength", ptr, -1);
    if (lo < 0 || (hi >= 0 && hi < lo)) unsupported("minLength", ptr, "expected 0 <= minLength <= maxLength");
    if (lo > 10000 || hi > 10000) unsupported("maxLength", ptr, "length bounds above 10000");
    std::string rep = "{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "}";
    return string_rule(hint + "_str", "(" + basic("json_char") + ")" + rep);
  }
  return basic("json_string");
}

}  // namespace brioche::grammar::schema
