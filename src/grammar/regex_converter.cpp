// Regex -> EBNF expression. Supports what JSON-schema patterns and
// guided_regex use in practice: literals and escapes, ".", classes with
// ranges/negation/\d\w\s, groups (capturing, (?:...), named), alternation,
// Unicode general categories (\p{L}, \P{M}, \p{Nd}, unicode_categories.h),
// quantifiers * + ? {m} {m,} {m,n} (lazy/possessive suffixes accepted: they
// do not change the language), and ^ / $ at the ends. The whole pattern must
// match (xgrammar's convention). Lookaround and backreferences are errors.
//
// Inside a JSON string (schema `pattern`), classes and "." exclude the raw
// bytes JSON forbids there ('"', '\\', U+0000..U+001F), and literal
// characters are written JSON-escaped, so the result stays valid JSON.
//
// Groups, and quantifiers stacked on one atom, nest at most kMaxRegexNesting
// deep: the parser recurses once per group, and every level becomes up to
// three levels of EBNF parentheses and IR nodes.
#include <algorithm>
#include <cstdio>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/regex_dfa.h"
#include "grammar/regex_scan.h"
#include "grammar/unicode_categories.h"
#include "grammar/utf8.h"

namespace brioche::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.emplace_back(lo, hi);
  }
  return out;
}
Ranges complement(const Ranges& r) {
  Ranges n = normalize(r), out;
  uint32_t next = 0;
  for (auto [lo, hi] : n) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}
Ranges subtract(const Ranges& a, const Ranges& b) {
  Ranges nb = complement(b), out;
  for (auto [alo, ahi] : normalize(a))
    for (auto [blo, bhi] : nb) {
      uint32_t lo = std::max(alo, blo), hi = std::min(ahi, bhi);
      if (lo <= hi) out.emplace_back(lo, hi);
    }
  return normalize(out);
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript \s: the set xgrammar uses too.
const Ranges kSpace = {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const Ranges kJsonForbidden = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
// Python's str.isspace, what `jsonschema` (Python's re) reads \s as.
const Ranges kPythonSpace = {{'\t', '\r'},     {0x1C, ' '},      {0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
                             {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};

Ranges category(const char* name) {
  Ranges r;
  unicode_category_ranges(name, r);
  return r;
}

// A character as a JSON string writes it where it must be escaped: the
// short escape where JSON has one, else \u with lowercase hex (what
// Python's json.dumps and most writers produce).
std::string json_escaped(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      return buf;
    }
  }
}

std::string class_text(const Ranges& r) {
  auto cp_text = [](uint32_t cp) {
    char buf[16];
    if (cp < 0x80 && cp >= 0x20 && cp != ']' && cp != '\\' && cp != '-' && cp != '^' && cp != '[' && cp != '"') {
      buf[0] = static_cast<char>(cp);
      buf[1] = 0;
    } else if (cp <= 0xFFFF) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    } else {
      std::snprintf(buf, sizeof buf, "\\U%08x", cp);
    }
    return std::string(buf);
  };
  std::string out = "[";
  for (auto [lo, hi] : r) {
    out += cp_text(lo);
    if (hi != lo) out += "-" + cp_text(hi);
  }
  return out + "]";
}

// The deepest nesting of groups in a pattern (escapes and classes skipped),
// for the error message; the parser bounds its own recursion.
int regex_group_depth(const std::string& p) {
  int depth = 0, deepest = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\') {
      ++i;
    } else if (p[i] == '[') {
      i = regex_class_end(p, i);
    } else if (p[i] == '(') {
      deepest = std::max(deepest, ++depth);
    } else if (p[i] == ')' && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// The start of a pattern for messages (a pattern may be megabytes long).
std::string pattern_excerpt(const std::string& p) { return p.size() <= 80 ? p : p.substr(0, 77) + "..."; }

class RegexParser {
 public:
  RegexParser(const std::string& p, bool json) : p_(p), json_(json) {}

  // One atom that reads one character at `pos` (a class, '.', an escape
  // such as \d or \n, a literal): its code points; `pos` moves past it.
  Ranges character_at(size_t& pos) {
    pos_ = pos;
    Ranges r;
    const char c = p_[pos_];
    if (c == '[') {
      r = parse_class_ranges();
    } else if (c == '.') {
      ++pos_;
      r = json_ ? complement({{'\n', '\n'}}) : Ranges{{0, 0x10FFFF}};
    } else if (c == '\\') {
      ++pos_;
      uint32_t cp = 0;
      if (!parse_escape(r, cp)) r = {{cp, cp}};
    } else {
      const uint32_t cp = parse_literal_cp();
      r = {{cp, cp}};
    }
    pos = pos_;
    return normalize(r);
  }

  std::string parse() {
    if (peek('^')) ++pos_;
    std::string e = parse_alt();
    if (pos_ < p_.size()) error("end of pattern or '|'");
    return e;
  }

 private:
  const std::string& p_;
  bool json_;
  size_t pos_ = 0;
  int nesting_ = 0;        // groups open around pos_
  bool at_start_ = true;   // no character can have been read before pos_
  int start_anchors_ = 0;  // '^' met where nothing can have been read (always true: dropped)

  [[noreturn]] void error(const std::string& expected) const {
    fail("regex: at offset ", pos_, " of /", pattern_excerpt(p_), "/: expected ", expected, ", found ",
         pos_ < p_.size() ? "'" + p_.substr(pos_, 8) + "'" : std::string("end of pattern"));
  }
  bool peek(char c) const { return pos_ < p_.size() && p_[pos_] == c; }

  // Whether nothing can be read after p_[i] in a match: what follows only
  // closes groups (unquantified) or starts other branches of them. A '$'
  // there is the end the full match has anyway; elsewhere (`^(a$)b`,
  // `(a$)+`, `^(?:a$)` with the search's tail after it) it asserts an end
  // this converter cannot write (it is no literal either), and is refused:
  // a schema's pattern goes to the DFA (regex_dfa.h), which reads it.
  bool ends_every_match(size_t i) const {
    while (i < p_.size()) {
      if (p_[i] == ')') {
        ++i;
        if (i < p_.size() && std::string_view("*+?{").find(p_[i]) != std::string_view::npos) return false;
      } else if (p_[i] == '|') {
        int depth = 0;  // skip the other branches, to the ')' that closes this group
        for (++i; i < p_.size() && !(p_[i] == ')' && depth == 0); ++i) {
          if (p_[i] == '\\')
            ++i;
          else if (p_[i] == '[')
            i = regex_class_end(p_, i);
          else if (p_[i] == '(')
            ++depth;
          else if (p_[i] == ')')
            --depth;
        }
      } else {
        return false;
      }
    }
    return true;
  }

  std::string parse_alt() {
    std::vector<std::string> alts{parse_concat()};
    while (peek('|')) {
      ++pos_;
      alts.push_back(parse_concat());
    }
    if (alts.size() == 1) return alts[0];
    std::string out;
    for (auto& a : alts) out += (out.empty() ? "(" : " | ") + a;
    return out + ")";
  }

  std::string parse_concat() {
    std::string out;
    const bool from_start = at_start_;  // nothing can be read before this branch
    while (pos_ < p_.size() && !peek('|') && !peek(')')) {
      if (peek('$')) {
        if (!ends_every_match(pos_ + 1)) error("'$' only where a match ends");
        ++pos_;  // end anchor: the whole pattern matches anyway
        continue;
      }
      if (peek('^')) {
        // An anchor where nothing can have been read yet (`^(^arn:...)$`) always holds.
        if (!out.empty() || !from_start) error("'^' only at the start of the pattern");
        ++pos_;
        ++start_anchors_;
        continue;
      }
      at_start_ = from_start && out.empty();  // a group opened here starts at the start too
      const int anchors = start_anchors_;
      std::string atom = parse_atom();
      const std::string quantified = parse_quantifier(atom);
      // A second round of a repeated group would start elsewhere: its '^' would not hold.
      if (quantified != atom && start_anchors_ != anchors) error("'^' only at the start of the pattern");
      atom = quantified;
      at_start_ = false;
      out += (out.empty() ? "" : " ") + atom;
    }
    at_start_ = from_start;  // for the next branch of the same alternation
    return out.empty() ? "\"\"" : "(" + out + ")";
  }

  std::string parse_quantifier(std::string atom) {
    for (int stacked = 1;; ++stacked) {
      if (pos_ >= p_.size()) return atom;
      char c = p_[pos_];
      std::string q;
      if (c == '*' || c == '+' || c == '?') {
        q = std::string(1, c);
        ++pos_;
      } else if (c == '{') {
        size_t save = pos_++;
        auto num = [&]() -> long {
          size_t s = pos_;
          long v = 0;
          while (pos_ < p_.size() && std::isdigit(static_cast<unsigned char>(p_[pos_]))) {
            v = v * 10 + (p_[pos_++] - '0');
            // The EBNF's own bound; checked per digit so the number never overflows.
            if (v > kMaxRepeatCount) error("a repetition count at most 2147483647 in {m,n}");
          }
          return pos_ == s ? -1 : v;
        };
        long lo = num(), hi = lo;
        if (lo < 0) {  // not a quantifier: literal '{'
          pos_ = save;
          return atom;
        }
        if (peek(',')) {
          ++pos_;
          hi = num();
        }
        if (!peek('}')) error("'}' closing the {m,n} quantifier");
        ++pos_;
        if (hi >= 0 && hi < lo) error("{m,n} with m <= n");
        q = "{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "}";
      } else {
        return atom;
      }
      // A quantifier on a quantified atom nests like a group.
      if (nesting_ + stacked > kMaxRegexNesting)
        fail("regex: at offset ", pos_, " of /", pattern_excerpt(p_), "/: groups and quantifiers nest more than ",
             kMaxRegexNesting, " deep; the limit is ", kMaxRegexNesting);
      if (peek('?') || peek('+')) ++pos_;  // lazy / possessive: same language
      atom = "(" + atom + ")" + q;
    }
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[pos_]))) error("hex digits");
      char h = p_[pos_++];
      v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : std::tolower(h) - 'a' + 10);
    }
    return v;
  }

  // Escape after '\': either a class (returns true, fills ranges) or a char.
  bool parse_escape(Ranges& cls, uint32_t& cp) {
    if (pos_ >= p_.size()) error("an escape after '\\'");
    char e = p_[pos_++];
    // A JSON-schema pattern reads \d \w \s as its validators do (Python's
    // re, also Rust's regex: Unicode digits Nd, letters and numbers L N and
    // '_', Python's whitespace); a plain regex as ECMA-262 and xgrammar do.
    switch (e) {
      case 'd': cls = json_ ? category("Nd") : kDigit; return true;
      case 'D': cls = complement(json_ ? category("Nd") : kDigit); return true;
      case 'w': cls = json_ ? word() : kWord; return true;
      case 'W': cls = complement(json_ ? word() : kWord); return true;
      case 's': cls = json_ ? kPythonSpace : kSpace; return true;
      case 'S': cls = complement(json_ ? kPythonSpace : kSpace); return true;
      case 'n': cp = '\n'; return false;
      case 'r': cp = '\r'; return false;
      case 't': cp = '\t'; return false;
      case 'f': cp = '\f'; return false;
      case 'v': cp = '\v'; return false;
      case '0': cp = 0; return false;
      case 'x': cp = parse_hex(2); return false;
      case 'u':
        if (peek('{')) {
          ++pos_;
          uint32_t v = 0;
          while (pos_ < p_.size() && p_[pos_] != '}') {
            v = v * 16 + parse_hex(1);
            if (v > 0x10FFFF) error("a codepoint at most U+10FFFF in \\u{...}");
          }
          if (!peek('}')) error("'}' closing \\u{...}");
          ++pos_;
          cp = v;
          return false;
        }
        cp = parse_hex(4);
        return false;
      case 'p':
      case 'P': {
        // A Unicode general category: \p{L}, \p{Nd}, \p{gc=Letter}; \P{...} is its complement.
        if (!peek('{')) error("'{' after \\p (a Unicode general category such as \\p{L})");
        const size_t close = p_.find('}', pos_);
        if (close == std::string::npos) error("'}' closing \\p{...}");
        const std::string name = p_.substr(pos_ + 1, close - pos_ - 1);
        if (!unicode_category_ranges(name, cls))
          error("a Unicode general category in \\p{...} (L, Lu, Nd, Letter, ...)");
        pos_ = close + 1;
        if (e == 'P') cls = complement(cls);
        return true;
      }
      case 'b':
      case 'B': --pos_; error("no word-boundary assertions (\\b, \\B)");
      default:
        if (std::isdigit(static_cast<unsigned char>(e))) {
          --pos_;
          error("no backreferences");
        }
        if (std::isalnum(static_cast<unsigned char>(e))) {
          --pos_;
          error("a known escape");
        }
        cp = static_cast<unsigned char>(e);
        return false;
    }
  }

  uint32_t parse_literal_cp() {
    uint32_t cp;
    size_t len = decode_utf8(p_, pos_, &cp);
    if (len == 0) error("valid UTF-8");
    pos_ += len;
    return cp;
  }

  static Ranges word() { return regex_word_characters(true); }

  std::string class_expr(const Ranges& r) {
    if (normalize(r).empty()) error("a character class that matches something");
    return regex_class_ebnf(r, json_);
  }

  std::string literal_expr(uint32_t cp) {
    std::string s;
    if (json_ && (cp < 0x20 || cp == '"' || cp == '\\'))
      s = json_escaped(cp);  // written as the JSON escape of the character
    else
      append_utf8(s, cp);
    return ebnf_quote(s);
  }

  std::string parse_atom() {
    char c = p_[pos_];
    if (c == '(') {
      if (++nesting_ > kMaxRegexNesting)
        fail("regex: the pattern nests groups ", regex_group_depth(p_), " deep; the limit is ", kMaxRegexNesting,
             " (first past it at offset ", pos_, " of /", pattern_excerpt(p_), "/)");
      ++pos_;
      if (peek('?')) {
        ++pos_;
        if (peek(':')) {
          ++pos_;
        } else if (peek('<') && pos_ + 1 < p_.size() && p_[pos_ + 1] != '=' && p_[pos_ + 1] != '!') {
          while (pos_ < p_.size() && p_[pos_] != '>') ++pos_;
          ++pos_;
        } else if (peek('P') && pos_ + 1 < p_.size() && p_[pos_ + 1] == '<') {
          while (pos_ < p_.size() && p_[pos_] != '>') ++pos_;
          ++pos_;
        } else {
          error("a group kind (?: or (?<name> (lookaround is not supported)");
        }
      }
      std::string inner = parse_alt();
      if (!peek(')')) error("')'");
      ++pos_;
      --nesting_;
      return inner;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      // Any character; in a JSON-schema pattern any but a newline, as
      // validators read it (ECMA-262 and Python without the dotall flag).
      return class_expr(json_ ? complement({{'\n', '\n'}}) : Ranges{{0, 0x10FFFF}});
    }
    if (c == '\\') {
      ++pos_;
      Ranges cls;
      uint32_t cp = 0;
      if (parse_escape(cls, cp)) return class_expr(cls);
      return literal_expr(cp);
    }
    if (c == '*' || c == '+' || c == '?') error("something to repeat before the quantifier");
    if (c == ')') error("a matching '('");
    return literal_expr(parse_literal_cp());
  }

  std::string parse_class() { return class_expr(parse_class_ranges()); }

  Ranges parse_class_ranges() {
    ++pos_;
    bool negated = false;
    if (peek('^')) {
      negated = true;
      ++pos_;
    }
    Ranges r;
    bool first = true;
    while (pos_ < p_.size() && (p_[pos_] != ']' || first)) {
      first = false;
      uint32_t lo;
      if (p_[pos_] == '\\') {
        ++pos_;
        Ranges cls;
        if (parse_escape(cls, lo)) {
          r.insert(r.end(), cls.begin(), cls.end());
          continue;
        }
      } else {
        lo = parse_literal_cp();
      }
      uint32_t hi = lo;
      if (pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        if (p_[pos_] == '\\') {
          ++pos_;
          Ranges cls;
          if (parse_escape(cls, hi)) error("a character after '-' in the class");
        } else {
          hi = parse_literal_cp();
        }
        if (hi < lo) error("a range lo-hi with lo <= hi");
      }
      r.emplace_back(lo, hi);
    }
    if (!peek(']')) error("']' closing the class");
    ++pos_;
    return negated ? complement(r) : r;
  }
};

}  // namespace

// Inside a JSON string a character JSON must escape ('"', '\\',
// U+0000..U+001F) is offered as its escape (json_escaped), one literal
// each: one character, as length bounds count them (`%{m,n}`).
std::string regex_class_ebnf(const CodepointRanges& ranges, bool inside_json_string) {
  const Ranges r = normalize(ranges);
  if (!inside_json_string) return class_text(r);
  const Ranges raw = subtract(r, kJsonForbidden);
  std::string out = raw.empty() ? "" : class_text(raw);
  for (auto [lo, hi] : subtract(r, complement(kJsonForbidden)))
    for (uint32_t cp = lo; cp <= hi; ++cp) out += (out.empty() ? "" : " | ") + ebnf_quote(json_escaped(cp));
  return raw == r ? out : "(" + out + ")";
}

CodepointRanges regex_character_at(const std::string& pattern, size_t& pos, bool inside_json_string) {
  return RegexParser(pattern, inside_json_string).character_at(pos);
}

CodepointRanges regex_word_characters(bool inside_json_string) {
  if (!inside_json_string) return kWord;
  Ranges r = category("L"), n = category("N");
  r.insert(r.end(), n.begin(), n.end());
  r.emplace_back('_', '_');
  return normalize(r);
}

std::string regex_to_ebnf_expr(const std::string& pattern, bool inside_json_string) {
  return RegexParser(pattern, inside_json_string).parse();
}

Grammar Grammar::from_regex(const std::string& pattern) {
  return from_ebnf("root ::= " + regex_to_ebnf_expr(pattern, false) + "\n", "root");
}

}  // namespace brioche::grammar
