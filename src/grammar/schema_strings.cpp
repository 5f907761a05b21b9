// JSON Schema strings: pattern (a search), format, minLength/maxLength.

#include <algorithm>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "grammar/regex_dfa.h"
#include "grammar/regex_scan.h"
#include "grammar/schema_converter.h"
#include "grammar/utf8.h"

namespace brioche::grammar::schema {
namespace {

// A pattern's DFA written as one expression (shared sub-expressions are
// written out again) may hold this many character classes; past it, rules.
constexpr DfaExpressionBudget kDfaExpressionBudget{.max_classes = 2048, .max_bytes = 1 << 20};

// format: regex writes groups nested at most this deep (Python's parser
// recurses per group: a deep nesting would stop it, not be a regex error).
constexpr int kRegexFormatNesting = 16;

// The formats JSON Schema 2020-12 defines (section 7.3 of its validation
// vocabulary); draft-04's and OpenAPI's extras are not among them.
bool format_is_defined(const std::string& f) {
  static const std::set<std::string> kDefined = {
      "date-time", "date",          "time", "duration",     "email",        "idn-email",
      "hostname",  "idn-hostname",  "ipv4", "ipv6",         "uri",          "uri-reference",
      "iri",       "iri-reference", "uuid", "uri-template", "json-pointer", "relative-json-pointer",
      "regex"};
  return kDefined.count(f) > 0;
}

// A format's language as a DFA, built once per process: uri-reference's
// (its IPv6 literal) takes ~40 ms to determinise, and a schema may hold it
// beside many patterns (GitLab's includes: 14).
const RegexDfa& format_dfa(const std::string& format, const std::string& regular) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<const RegexDfa>> built;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<const RegexDfa>& dfa = built[format];
  if (!dfa)
    dfa = std::make_unique<const RegexDfa>(regex_search_dfa("^(?:" + regular + ")$", {.inside_json_string = true}));
  return *dfa;
}

// The fewest and the most characters of a DFA's strings (the most: -1 when
// a cycle repeats without bound; every state reaches an accepting one, so
// any cycle from the start does). The fewest: a breadth-first search; the
// most: the longest path, depth-first, children before parents.
std::pair<int64_t, int64_t> length_range(const RegexDfa& dfa) {
  const size_t n = dfa.states.size();
  if (n == 0) return {-1, -1};
  std::vector<int64_t> dist(n, -1);
  std::vector<int32_t> queue{0};
  dist[0] = 0;
  for (size_t i = 0; i < queue.size(); ++i)
    for (const RegexDfa::Edge& edge : dfa.states[size_t(queue[i])].edges)
      if (dist[size_t(edge.target)] < 0) {
        dist[size_t(edge.target)] = dist[size_t(queue[i])] + 1;
        queue.push_back(edge.target);
      }
  int64_t fewest = -1;
  for (size_t s = 0; s < n; ++s)
    if (dfa.states[s].accepting && dist[s] >= 0 && (fewest < 0 || dist[s] < fewest)) fewest = dist[s];
  std::vector<int64_t> most(n, -1);  // from each state to an end
  std::vector<uint8_t> mark(n, 0);   // 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> stack{{0, 0}};
  mark[0] = 1;
  while (!stack.empty()) {
    auto& [s, e] = stack.back();
    const RegexDfa::State& st = dfa.states[size_t(s)];
    if (e < st.edges.size()) {
      const int32_t t = st.edges[e++].target;
      if (mark[size_t(t)] == 1) return {fewest, -1};  // a cycle
      if (mark[size_t(t)] == 0) {
        mark[size_t(t)] = 1;
        stack.push_back({t, 0});
      }
      continue;
    }
    int64_t hi = st.accepting ? 0 : -1;
    for (const RegexDfa::Edge& edge : st.edges)
      if (most[size_t(edge.target)] >= 0) hi = std::max(hi, most[size_t(edge.target)] + 1);
    most[size_t(s)] = hi;
    mark[size_t(s)] = 2;
    stack.pop_back();
  }
  return {fewest, most[0]};
}

// A pattern that opens with a length lookahead, `(?=^.{m,n}$)R` or
// `^(?=.{m,n}$)R` (n may be open, `{m,}`, or absent, `{m}`): the rest R,
// read from the string's start, and the lengths the lookahead allows.
struct LengthLookahead {
  std::string rest;  // R anchored at the start: ^R
  int64_t lo = 0, hi = -1;
};

std::optional<LengthLookahead> leading_length_lookahead(const std::string& p) {
  size_t i = 0;
  if (p.compare(0, 6, "(?=^.{") == 0) {
    i = 6;
  } else if (p.compare(0, 6, "^(?=.{") == 0 || p.compare(0, 7, "^(?=^.{") == 0) {
    i = p[4] == '^' ? 7 : 6;
  } else {
    return std::nullopt;
  }
  auto number = [&](int64_t* out) {
    const size_t from = i;
    while (i < p.size() && p[i] >= '0' && p[i] <= '9' && i - from < 9) ++i;
    if (i == from || (i < p.size() && p[i] >= '0' && p[i] <= '9')) return false;
    *out = std::stoll(p.substr(from, i - from));
    return true;
  };
  LengthLookahead out;
  if (!number(&out.lo)) return std::nullopt;
  out.hi = out.lo;
  if (i < p.size() && p[i] == ',') {
    ++i;
    out.hi = -1;
    if (i < p.size() && p[i] != '}' && !number(&out.hi)) return std::nullopt;
  }
  if (p.compare(i, 3, "}$)") != 0 || (out.hi >= 0 && out.hi < out.lo)) return std::nullopt;
  const std::string rest = p.substr(i + 3);
  // A top-level '|' would end the lookahead's branch: `(?=^.{2}$)a|b` is
  // `((?=^.{2}$)a)|b`.
  int depth = 0;
  for (size_t k = 0; k < rest.size(); ++k) {
    if (rest[k] == '\\') {
      ++k;
    } else if (rest[k] == '[') {
      k = regex_class_end(rest, k);
    } else if (rest[k] == '(') {
      ++depth;
    } else if (rest[k] == ')') {
      --depth;
    } else if (rest[k] == '|' && depth == 0) {
      return std::nullopt;
    }
  }
  out.rest = "^" + rest;  // one branch: ^R reads it from the start
  return out;
}

}  // namespace

// Formats later drafts added: uri-reference (draft 6), duration and uuid
// (2019-09). Under a root that names an earlier draft they are unknown
// formats, which validators leave unchecked (jsonschema's format checker
// is per draft). uuid stays written: any uuid is valid there too.
bool SchemaConverter::format_in_draft(const std::string& f) const {
  if (!root_.is_object() || !root_.contains("$schema") || !root_["$schema"].is_string()) return true;
  const std::string uri = root_["$schema"].get<std::string>();
  auto names = [&](std::initializer_list<const char*> drafts) {
    return std::any_of(drafts.begin(), drafts.end(), [&](const char* d) { return uri.find(d) != std::string::npos; });
  };
  if (f == "duration") return !names({"draft-03", "draft-04", "draft-06", "draft-07"});
  if (f == "uri-reference" || f == "json-pointer") return !names({"draft-03", "draft-04"});
  return true;
}

// pattern + minLength/maxLength, two ways, both exact. The cheap one, when
// the pattern is a sequence of one-character atoms (a class, an escape like
// \d, '.', or a literal character), each maybe repeated, with at most one
// whose count varies (`^[a-z][a-z0-9-]*$`, `\d{3,}`, `^arn:` + any rest),
// or with every length of the pattern inside the bounds: the bounds go to
// that atom's count (length_bounded_atoms). Any other pattern: one count of
// characters over the whole pattern, `(pattern)%{lo,hi}` (Expr::Kind::
// kLengthBound: the product of the pattern's automaton and a counter; every
// class and literal the JSON-string regex writes is one character).
// JSON Schema's `pattern` is an ECMA-262 search, not a full match: an end
// the pattern does not anchor (^, $) may hold any characters. (^https?://
// admits "https://example.com", not only the prefix itself.) Each branch of
// a top-level alternation is anchored on its own: ^a$|^b$ is two full
// matches, ^a|b$ a prefix or a suffix.
std::string SchemaConverter::search_pattern(const std::string& p) {
  // The top-level branches: '|' outside groups, classes and escapes.
  std::vector<std::string> branches;
  size_t from = 0;
  int depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\') {
      ++i;
    } else if (p[i] == '[') {
      i = regex_class_end(p, i);
    } else if (p[i] == '(') {
      ++depth;
    } else if (p[i] == ')') {
      --depth;
    } else if (p[i] == '|' && depth == 0) {
      branches.push_back(p.substr(from, i - from));
      from = i + 1;
    }
  }
  branches.push_back(p.substr(from));
  std::string out;
  for (const std::string& b : branches) {
    const bool at_start = !b.empty() && b.front() == '^';
    size_t backslashes = 0;  // before the last character: an odd run makes a final '$' a literal
    while (backslashes + 1 < b.size() && b[b.size() - 2 - backslashes] == '\\') ++backslashes;
    const bool at_end = b.size() > (at_start ? 1u : 0u) && b.back() == '$' && backslashes % 2 == 0;
    const std::string body = b.substr(at_start ? 1 : 0, b.size() - (at_start ? 1 : 0) - (at_end ? 1 : 0));
    out += std::string(out.empty() ? "" : "|") + (at_start ? "" : "[\\s\\S]*") + "(?:" + body + ")" +
           (at_end ? "" : "[\\s\\S]*");
  }
  return "^(?:" + out + ")$";
}

std::optional<std::string> SchemaConverter::length_bounded_atoms(const std::string& pattern, int64_t lo, int64_t hi,
                                                                 const std::string& ptr) {
  // An atom matches exactly one character; `min`..`max` repetitions (max < 0: unbounded).
  struct Atom {
    std::string text;
    int64_t min = 1, max = 1;
  };
  std::vector<Atom> atoms;
  const bool at_start = !pattern.empty() && pattern.front() == '^';
  size_t backslashes = 0;  // before the last character: an odd run makes a final '$' a literal
  while (backslashes + 1 < pattern.size() && pattern[pattern.size() - 2 - backslashes] == '\\') ++backslashes;
  const bool at_end = pattern.size() > (at_start ? 1u : 0u) && pattern.back() == '$' && backslashes % 2 == 0;
  std::string p = pattern.substr(at_start ? 1 : 0, pattern.size() - (at_start ? 1 : 0) - (at_end ? 1 : 0));
  // One group around everything (^(...)$), with no group or alternation
  // inside, matches what its content matches.
  if (p.size() >= 2 && p.front() == '(' && p.back() == ')' && p.find_first_of("()|", 1) == p.size() - 1 &&
      p[p.size() - 2] != '\\')
    p = p.substr(1, p.size() - 2);
  // A search: an end the pattern does not anchor may hold any characters.
  if (!at_start) atoms.push_back({"[\\s\\S]", 0, -1});
  for (size_t i = 0; i < p.size();) {
    size_t end = i;  // one past the atom
    const char c = p[i];
    if (c == '[') {
      size_t k = i + 1;
      if (k < p.size() && p[k] == '^') ++k;
      if (k < p.size() && p[k] == ']') return std::nullopt;  // [] and [^]: ECMA's empty and any class
      for (; k < p.size() && p[k] != ']'; ++k) {
        if (p[k] == '[') return std::nullopt;
        if (p[k] == '\\') ++k;
      }
      if (k >= p.size()) return std::nullopt;
      end = k + 1;
    } else if (c == '\\') {
      if (i + 1 >= p.size()) return std::nullopt;
      const char e = p[i + 1];
      if ((e == 'p' || e == 'P') && i + 2 < p.size() && p[i + 2] == '{' && p.find('}', i) != std::string::npos)
        end = p.find('}', i) + 1;  // a Unicode general category: one character
      else if (e == 'u' && i + 6 <= p.size())
        end = i + 6;
      else if (e == 'x' && i + 4 <= p.size())
        end = i + 4;
      else if (std::string("dDwWsSntrfv.-\\/[](){}*+?^$|").find(e) != std::string::npos)
        end = i + 2;
      else
        return std::nullopt;  // \b, back-references, ...: not one character
    } else if (std::string("()|*+?{}^$").find(c) != std::string::npos) {
      return std::nullopt;
    } else {
      uint32_t cp;
      const size_t len = decode_utf8(p, i, &cp);
      if (len == 0) return std::nullopt;
      end = i + len;
    }
    Atom atom{p.substr(i, end - i)};
    i = end;
    if (i < p.size() && (p[i] == '*' || p[i] == '+' || p[i] == '?')) {
      atom.min = p[i] == '+' ? 1 : 0;
      atom.max = p[i] == '?' ? 1 : -1;
      ++i;
    } else if (i < p.size() && p[i] == '{') {
      const size_t close = p.find('}', i);
      if (close == std::string::npos) return std::nullopt;
      const std::string inner = p.substr(i + 1, close - i - 1);
      const size_t comma = inner.find(',');
      auto number = [&](const std::string& t) -> int64_t {  // -2: not a count
        if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos) return -2;
        return std::stoll(t);
      };
      atom.min = number(comma == std::string::npos ? inner : inner.substr(0, comma));
      atom.max = comma == std::string::npos  ? atom.min
                 : comma + 1 == inner.size() ? -1
                                             : number(inner.substr(comma + 1));
      if (atom.min < 0 || atom.max == -2 || (atom.max >= 0 && atom.max < atom.min)) return std::nullopt;
      i = close + 1;
    }
    if (i < p.size() && p[i] == '?') ++i;  // a lazy quantifier matches the same strings
    atoms.push_back(atom);
  }
  // A search contains a^k B (k >= m) exactly when it contains a^m B: at an
  // end the pattern leaves open, the first (last) atom after (before) the
  // free run needs only its least count.
  if (!at_start && atoms.size() > 1) atoms[1].max = atoms[1].min;
  if (!at_end && atoms.size() > (at_start ? 0u : 1u)) atoms.back().max = atoms.back().min;
  if (!at_end) atoms.push_back({"[\\s\\S]", 0, -1});
  std::erase_if(atoms, [](const Atom& a) { return a.max == 0; });
  // Neighbours with the same text are one atom (x{1,2}x* = x{1,}).
  std::vector<Atom> merged;
  for (const Atom& a : atoms) {
    if (!merged.empty() && merged.back().text == a.text) {
      Atom& m = merged.back();
      m.min += a.min;
      m.max = m.max < 0 || a.max < 0 ? -1 : m.max + a.max;
    } else {
      merged.push_back(a);
    }
  }
  atoms = std::move(merged);
  // Lengths: the fixed part, and the atoms whose count varies.
  int64_t fixed = 0;
  std::vector<size_t> varying;
  for (size_t a = 0; a < atoms.size(); ++a) {
    fixed += atoms[a].min;
    if (atoms[a].max != atoms[a].min) varying.push_back(a);
  }
  auto none_fits = [&] {
    unsupported(hi >= 0 ? "maxLength" : "minLength", ptr,
                "no string matches pattern '" + pattern + "' within the length bounds");
  };
  if (varying.size() == 1) {
    // The one varying atom takes what the bounds leave: exactly the
    // strings of the pattern whose length is within them.
    Atom& v = atoms[varying[0]];
    const int64_t others = fixed - v.min;
    const int64_t from = std::max(v.min, lo - others);
    const int64_t to = hi < 0 ? v.max : v.max < 0 ? hi - others : std::min(v.max, hi - others);
    if (to >= 0 && to < from) none_fits();
    if (from > kMaxRepeatCount || to > kMaxRepeatCount)
      unsupported(from > kMaxRepeatCount ? "minLength" : "maxLength", ptr,
                  "expected a length bound of at most 2147483647, found " + std::to_string(std::max(from, to)));
    v.min = from;
    v.max = to;
  } else {
    // No atom varies, or several: exact only when every length the
    // pattern allows is within the bounds (they then add nothing).
    int64_t longest = 0;
    for (const Atom& a : atoms) longest = a.max < 0 || longest < 0 ? -1 : longest + a.max;
    if (varying.empty() && (fixed < lo || (hi >= 0 && fixed > hi))) none_fits();
    if (fixed < lo || (hi >= 0 && (longest < 0 || longest > hi))) return std::nullopt;
  }
  std::string out = "^";
  for (const Atom& a : atoms) {
    out += a.text;
    if (a.min == 1 && a.max == 1) continue;
    out += "{" + std::to_string(a.min) + "," + (a.max >= 0 ? std::to_string(a.max) : "") + "}";
  }
  return out + "$";
}

std::string SchemaConverter::pattern_ebnf(const std::string& pattern, const std::string& ptr) {
  try {
    return regex_to_ebnf_expr(pattern, /*inside_json_string=*/true);
  } catch (const Error& e) {
    unsupported("pattern", ptr, e.what());
  }
}

// One rule per state of the DFA (inside a JSON string); returns the start's.
std::string SchemaConverter::dfa_rules(const RegexDfa& dfa, const std::string& hint) {
  std::vector<std::string> names;
  for (size_t i = 0; i < dfa.states.size(); ++i) names.push_back(fresh(hint + "_re"));
  for (size_t i = 0; i < dfa.states.size(); ++i) {
    const RegexDfa::State& st = dfa.states[i];
    // A state's loop on itself is a repetition, not a call: s ::= (loop)* (other edges | "").
    std::string loop, rest;
    for (const RegexDfa::Edge& e : st.edges) {
      if (e.target == static_cast<int32_t>(i))
        loop = "(" + regex_class_ebnf(e.chars, true) + ")* ";
      else
        rest += (rest.empty() ? "" : " | ") + regex_class_ebnf(e.chars, true) + " " + names[e.target];
    }
    if (st.accepting) rest += rest.empty() ? "\"\"" : " | \"\"";
    const std::string body = loop + "(" + rest + ")";
    count_text(names[i].size() + body.size());
    rules_.emplace_back(names[i], body);
  }
  return names[0];
}

std::string SchemaConverter::dfa_string_rule(const RegexDfa& dfa, const std::string& hint) {
  const std::string expr = regex_dfa_expression(dfa, /*inside_json_string=*/true, kDfaExpressionBudget);
  return string_rule(hint, expr.empty() ? dfa_rules(dfa, hint) : expr);
}

std::string SchemaConverter::assertion_pattern(const std::string& pattern, int64_t lo, int64_t hi,
                                               const std::string& ptr, const std::string& hint) {
  const bool bounded = lo > 0 || hi >= 0;
  RegexDfa dfa;
  try {
    dfa = regex_search_dfa(pattern, {.inside_json_string = true});
    // A tree of repetitions is one expression, bounded like any pattern's.
    const std::string expr = regex_dfa_expression(dfa, /*inside_json_string=*/true, kDfaExpressionBudget);
    if (!expr.empty()) {
      if (!bounded) return string_rule(hint + "_pattern", expr);
      if (lo > kMaxRepeatCount || hi > kMaxRepeatCount)
        unsupported(lo > kMaxRepeatCount ? "minLength" : "maxLength", ptr,
                    "expected a length bound of at most 2147483647, found " + std::to_string(std::max(lo, hi)));
      return string_rule(hint + "_pattern",
                         "(" + expr + ")%{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "}");
    }
    // Other cycles: one rule per state, the length bounds counted in the DFA.
    if (bounded) dfa = regex_search_dfa(pattern, {.inside_json_string = true, .min_length = lo, .max_length = hi});
  } catch (const Error& e) {
    unsupported("pattern", ptr, e.what());
  }
  return string_rule(hint + "_pattern", dfa_rules(dfa, hint));
}

std::string SchemaConverter::format_and_pattern(const Json& s, const std::string& f, const std::string& ptr,
                                                const std::string& hint) {
  const std::string regular = format_regex(f);
  if (regular.empty())
    unsupported("pattern", ptr,
                "beside format '" + f +
                    "', whose strings are no regex here (expected one of date, "
                    "time, date-time, uuid, ipv4, uri, hostname)");
  const int64_t lo = count_of(s, "minLength", ptr, 0), hi = count_of(s, "maxLength", ptr, -1);
  if (hi >= 0 && hi < lo) unsupported("minLength", ptr, "expected 0 <= minLength <= maxLength");
  RegexDfa both;
  try {
    const RegexDfa& format = format_dfa(f, regular);
    const RegexDfa pattern = regex_search_dfa(s["pattern"].get<std::string>(),
                                              {.inside_json_string = true, .min_length = lo, .max_length = hi});
    both = regex_dfa_product({&format, &pattern}, {});
  } catch (const Error& e) {
    unsupported("pattern", ptr, e.what());
  }
  if (both.states.empty())
    unsupported("pattern", ptr, "no string of format '" + f + "' matches it (within the length bounds)");
  return dfa_string_rule(both, hint + "_" + sanitize(f));
}

// A format whose strings vary in length, with minLength/maxLength: one
// count of characters over the format's language, `(F)%{lo,hi}` as for a
// pattern (Expr::Kind::kLengthBound; `"format": "uri", "maxLength": 4096`
// is common in Snowplow's and CloudFormation's schemas). The count needs
// one item per JSON character: the format's regex (format_regex) read into
// EBNF writes that, and so does email's EBNF (classes, one-character
// literals, and escapes such as \" that are one character each).
std::string SchemaConverter::format_with_length(const Json& s, const std::string& f, const std::string& body,
                                                const std::string& ptr, const std::string& hint) {
  const char* which = s.contains("maxLength") ? "maxLength" : "minLength";
  const std::string regular = format_regex(f);
  const std::string counted = !regular.empty() ? pattern_ebnf(regular, ptr) : f == "email" ? body : std::string();
  if (counted.empty())
    unsupported(which, ptr,
                "beside format '" + f +
                    "' (expected a format whose length can be counted: date, time, date-time, uuid, email, ipv4, "
                    "ipv6, uri, uri-reference, hostname, json-pointer)");
  const int64_t lo = count_of(s, "minLength", ptr, 0), hi = count_of(s, "maxLength", ptr, -1);
  if (lo < 0 || (hi >= 0 && hi < lo)) unsupported("minLength", ptr, "expected 0 <= minLength <= maxLength");
  if (lo > kMaxRepeatCount || hi > kMaxRepeatCount)
    unsupported(lo > kMaxRepeatCount ? "minLength" : "maxLength", ptr,
                "expected a length bound of at most 2147483647, found " + std::to_string(std::max(lo, hi)));
  if (!regular.empty()) {  // bounds that admit none of the format's strings: said here, not a dead rule
    const auto [shortest, longest] = length_range(format_dfa(f, regular));
    if ((hi >= 0 && hi < shortest) || (longest >= 0 && lo > longest))
      unsupported(which, ptr,
                  "no string of format '" + f + "' has " + std::to_string(lo) + ".." +
                      (hi >= 0 ? std::to_string(hi) : "") + " characters (its strings have " +
                      std::to_string(shortest) + ".." + (longest >= 0 ? std::to_string(longest) : "") + ")");
  }
  const std::string bound = "%{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "}";
  return string_rule(hint + "_" + sanitize(f), "(" + counted + ")" + bound);
}

// format: regex, as validators check it: Python's re.compile (jsonschema's
// format checker) must accept the string. That language is not context-free
// (a back-reference needs its group, group names must differ, a lookbehind
// a fixed width), so the grammar writes a part of it that always compiles:
// literals, '.', classes with escapes and ranges within 0-9, a-z, A-Z,
// escapes (\d \D \s \S \w \W \n \t \r \f \v \a, \x.., \u...., escaped
// punctuation and backslash), groups (?: ...) and ( ... ) nested at most
// kRegexFormatNesting deep, lookahead (?= ...) (?! ...) unquantified,
// anchors ^ $ \b \B \A \Z unquantified, alternation, and * + ? {m} {m,}
// {m,n} (m <= n < 10, counts of at most 4 digits) each maybe lazy. Every
// string it admits is a valid regex; valid regexes outside it (back-
// references, named groups, lookbehind, inline flags) are not generated.
std::string SchemaConverter::regex_format_rule(const std::string& hint, const RegexWrap& wrap) {
  const std::string bs = "\"\\\\\\\\\"";  // one backslash of the regex: "\\" in the JSON text
  const std::string punct = "[.^$*+?{}()|\\[\\]/\\-#&~%,:;<=>@_'! ]";
  std::string ranges;
  for (const std::string& run : {std::string("0123456789"), std::string("abcdefghijklmnopqrstuvwxyz"),
                                 std::string("ABCDEFGHIJKLMNOPQRSTUVWXYZ")})
    for (size_t i = 0; i < run.size(); ++i)
      ranges += std::string(ranges.empty() ? "" : " | ") + "\"" + run[i] + "-\" [" + run[i] + "-" + run.back() + "]";
  const std::string hex = "[0-9A-Fa-f]";
  const std::string char_escape = "\"x\" " + hex + " " + hex + " | \"u\" " + hex + "{4}";
  const std::string literal = add_rule(hint + "_re_literal", "[^\\\"\\\\\\x00-\\x1f.^$*+?{}()|\\[\\]] | \"\\\\\\\"\"");
  const std::string escape =
      add_rule(hint + "_re_escape", bs + " ([dDsSwWntrfva] | " + punct + " | " + bs + " | " + char_escape + ")");
  const std::string class_item = add_rule(
      hint + "_re_class_item", "[^\\\"\\\\\\x00-\\x1f\\[\\]\\-^] | \"\\\\\\\"\" | " + bs + " ([dDsSwWntrfv] | " +
                                   punct + " | " + bs + " | " + char_escape + ") | " + ranges);
  const std::string char_class = add_rule(hint + "_re_class", "\"[\" \"^\"? " + class_item + "+ \"]\"");
  std::string pairs;
  for (char m = '0'; m <= '9'; ++m) pairs += std::string(pairs.empty() ? "" : " | ") + "\"" + m + ",\" [" + m + "-9]";
  const std::string quantifier =
      add_rule(hint + "_re_quantifier", "([*+?] | \"{\" ([0-9]{1,4} \",\"? | " + pairs + ") \"}\") \"?\"?");
  const std::string anchor = "[$^] | " + bs + " [bBAZ]";
  // Alternations nested d deep: groups inside one are the next depth's.
  std::string inner;  // the alternation one level down ("" at the deepest)
  std::string alternation;
  for (int depth = kRegexFormatNesting; depth >= 0; --depth) {
    std::string atom = literal + " | \".\" | " + escape + " | " + char_class;
    std::string piece = "(" + atom + ") " + quantifier + "? | " + anchor;
    if (!inner.empty()) {
      piece = "(" + atom + " | \"(\" (\"?:\")? " + inner + " \")\") " + quantifier + "? | " + anchor +
              " | \"(?\" [=!] " + inner + " \")\"";
    }
    const std::string piece_rule = add_rule(hint + "_re_piece", piece);
    alternation = add_rule(hint + "_re_alternation", piece_rule + "* (\"|\" " + piece_rule + "*)*");
    inner = alternation;
    // The outermost alternation without the empty regex.
    if (depth == 0 && wrap.nonempty)
      alternation = "(" + piece_rule + "+ (\"|\" " + piece_rule + "*)* | (\"|\" " + piece_rule + "*)+)";
  }
  if (wrap.prefix.empty() && wrap.suffix.empty()) return string_rule(hint + "_regex", alternation);
  auto quoted = [&](const std::string& text) { return text.empty() ? std::string() : ebnf_quote(text) + " "; };
  return string_rule(hint + "_regex", quoted(wrap.prefix) + "(" + alternation + ") " + quoted(wrap.suffix));
}

std::string SchemaConverter::visit_string(const Json& s, const std::string& ptr, const std::string& hint) {
  // The rule depends on these keywords only (and on the converter's
  // options): equal ones share it. GitLab CI holds `\.ya?ml$` beside
  // uri-reference 8 times, each a product of two DFAs.
  Json keywords = Json::object();
  for (const char* k : {"format", "pattern", "minLength", "maxLength"})
    if (s.contains(k)) keywords[k] = s[k];
  const std::string key = keywords.dump();
  if (auto it = string_rules_.find(key); it != string_rules_.end()) return it->second;
  std::string rule = convert_string(s, ptr, hint);
  string_rules_.emplace(key, rule);
  return rule;
}

std::string SchemaConverter::convert_string(const Json& s, const std::string& ptr, const std::string& hint) {
  // A format JSON Schema does not define (OpenAPI's int32, int64, byte,
  // double; Kubernetes' int-or-string; private ones) asserts nothing:
  // validators ignore it, and so does the grammar. A defined format the
  // grammar does not write is refused, not ignored: validators check it.
  if (s.contains("format") && s["format"].is_string() &&
      (!format_in_draft(s["format"].get<std::string>()) ||
       (!format_is_defined(s["format"].get<std::string>()) && format_ebnf(s["format"].get<std::string>()).empty()))) {
    Json rest = s;
    rest.erase("format");
    return visit_string(rest, ptr, hint);
  }
  if (s.contains("format")) {
    std::string f = s["format"].get<std::string>();
    std::string body = f == "regex" ? std::string("regex") : format_ebnf(f);
    if (body.empty())
      unsupported("format", ptr, "expected one of " + supported_formats() + ", regex, found '" + f + "'");
    if (f == "regex") {
      for (const char* k : {"minLength", "maxLength"})
        if (s.contains(k)) unsupported(k, ptr, "beside format 'regex' (expected it alone on a string)");
      if (!s.contains("pattern")) return regex_format_rule(hint, RegexWrap{});
      // GitLab's coverage, `^/.+/$`: a pattern of literal characters around
      // `.+` or `.*`. Such characters are literals of the written regexes,
      // so prefix + regex + suffix compiles too (a top-level | splits it
      // into branches that each keep their literal end); its `.` (no
      // newline) admits every written regex, which holds none.
      static const std::string kPlain =
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/#~%@,:;<=>!&_'` -";
      const std::string pattern = s["pattern"].is_string() ? s["pattern"].get<std::string>() : std::string();
      const size_t dot = pattern.find('.');
      const bool shaped = pattern.size() >= 4 && pattern.front() == '^' && pattern.back() == '$' &&
                          dot != std::string::npos && dot + 1 < pattern.size() - 1 &&
                          (pattern[dot + 1] == '+' || pattern[dot + 1] == '*');
      const std::string prefix = shaped ? pattern.substr(1, dot - 1) : "";
      const std::string suffix = shaped ? pattern.substr(dot + 2, pattern.size() - dot - 3) : "";
      auto plain = [&](const std::string& t) { return t.find_first_not_of(kPlain) == std::string::npos; };
      if (!shaped || !plain(prefix) || !plain(suffix))
        unsupported("pattern", ptr,
                    "beside format 'regex': expected ^P.+S$ or ^P.*S$ with P and S literal characters, found '" +
                        pattern + "'");
      return regex_format_rule(hint, {.prefix = prefix, .suffix = suffix, .nonempty = pattern[dot + 1] == '+'});
    }
    if (s.contains("pattern")) return format_and_pattern(s, f, ptr, hint);
    if (s.contains("minLength") || s.contains("maxLength")) {
      const char* which = s.contains("maxLength") ? "maxLength" : "minLength";
      // Formats of one fixed length: the bounds either admit it (and add
      // nothing) or admit no string.
      const int64_t fixed = f == "uuid" ? 36 : f == "date" ? 10 : -1;
      if (fixed >= 0) {
        if (count_of(s, "minLength", ptr, 0) > fixed ||
            (s.contains("maxLength") && count_of(s, "maxLength", ptr, 0) < fixed))
          unsupported(which, ptr,
                      "format '" + f + "' strings have " + std::to_string(fixed) + " characters; none fits");
        return string_rule(hint + "_" + sanitize(f), "(" + body + ")");
      }
      return format_with_length(s, f, body, ptr, hint);
    }
    return string_rule(hint + "_" + sanitize(f), "(" + body + ")");
  }
  if (s.contains("pattern")) {
    std::string pattern = s["pattern"].get<std::string>();
    // `(?=^.{3,63}$)R` is a length count the DFA would hold (one state per
    // state of R and length, then one rule each); as minLength/maxLength
    // beside ^(?:R) it is one counted bound, `(R)%{3,63}`. Exact where no
    // string of R holds a newline, which '.' excludes: then the lookahead
    // says nothing but the length.
    if (std::optional<LengthLookahead> ahead = leading_length_lookahead(pattern)) {
      bool newline = true;
      try {
        const RegexDfa rest = regex_search_dfa(ahead->rest, {.inside_json_string = true});
        newline = std::any_of(rest.states.begin(), rest.states.end(), [](const RegexDfa::State& st) {
          return std::any_of(st.edges.begin(), st.edges.end(), [](const RegexDfa::Edge& e) {
            return std::any_of(e.chars.begin(), e.chars.end(),
                               [](const auto& range) { return range.first <= '\n' && '\n' <= range.second; });
          });
        });
      } catch (const Error&) {
        // R alone is not read here: the whole pattern's DFA decides (or refuses).
      }
      if (!newline) {
        const int64_t lo = std::max(count_of(s, "minLength", ptr, 0), ahead->lo);
        const int64_t max_length = count_of(s, "maxLength", ptr, -1);
        const int64_t hi = max_length < 0 ? ahead->hi : ahead->hi < 0 ? max_length : std::min(max_length, ahead->hi);
        if (hi >= 0 && hi < lo)
          unsupported("pattern", ptr,
                      "no string matches pattern '" + pattern + "' within the length bounds " + std::to_string(lo) +
                          ".." + std::to_string(hi));
        Json counted = s;
        counted["pattern"] = ahead->rest;
        counted["minLength"] = lo;
        if (hi >= 0) counted["maxLength"] = hi;
        return visit_string(counted, ptr, hint);
      }
    }
    // Anchors inside a group (`(a|^b$)`) are read by the DFA too: the plain
    // converter's refusal sends such a pattern there (its own error kept
    // when the DFA cannot read it either).
    bool assertions = regex_has_assertions(pattern);
    if (!assertions) {
      try {
        (void)regex_to_ebnf_expr(search_pattern(pattern), /*inside_json_string=*/true);
      } catch (const Error& plain) {
        try {
          (void)regex_search_dfa(pattern, {});
        } catch (const Error&) {
          unsupported("pattern", ptr, plain.what());
        }
        assertions = true;
      }
    }
    if (assertions) {
      const int64_t lo = count_of(s, "minLength", ptr, 0), hi = count_of(s, "maxLength", ptr, -1);
      if (lo < 0 || (hi >= 0 && hi < lo)) unsupported("minLength", ptr, "expected 0 <= minLength <= maxLength");
      return assertion_pattern(pattern, lo, hi, ptr, hint);
    }
    if (s.contains("minLength") || s.contains("maxLength")) {
      int64_t lo = count_of(s, "minLength", ptr, 0), hi = count_of(s, "maxLength", ptr, -1);
      if (lo < 0 || (hi >= 0 && hi < lo)) unsupported("minLength", ptr, "expected 0 <= minLength <= maxLength");
      if (std::optional<std::string> atoms = length_bounded_atoms(pattern, lo, hi, ptr))
        return string_rule(hint + "_pattern", pattern_ebnf(*atoms, ptr));
      if (lo > kMaxRepeatCount || hi > kMaxRepeatCount)
        unsupported(lo > kMaxRepeatCount ? "minLength" : "maxLength", ptr,
                    "expected a length bound of at most 2147483647, found " + std::to_string(std::max(lo, hi)));
      const std::string bound = "%{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "}";
      return string_rule(hint + "_pattern", "(" + pattern_ebnf(search_pattern(pattern), ptr) + ")" + bound);
    }
    return string_rule(hint + "_pattern", pattern_ebnf(search_pattern(pattern), ptr));
  }
  if (s.contains("minLength") || s.contains("maxLength")) {
    int64_t lo = count_of(s, "minLength", ptr, 0), hi = count_of(s, "maxLength", ptr, -1);
    if (lo < 0 || (hi >= 0 && hi < lo)) unsupported("minLength", ptr, "expected 0 <= minLength <= maxLength");
    // Any bound is exact: a large one is counted, not unrolled (CounterEdge).
    if (lo > kMaxRepeatCount || hi > kMaxRepeatCount)
      unsupported(lo > kMaxRepeatCount ? "minLength" : "maxLength", ptr,
                  "expected a length bound of at most 2147483647, found " + std::to_string(std::max(lo, hi)));
    std::string rep = "{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "}";
    return string_rule(hint + "_str", "(" + basic("json_char") + ")" + rep);
  }
  return basic("json_string");
}

}  // namespace brioche::grammar::schema
