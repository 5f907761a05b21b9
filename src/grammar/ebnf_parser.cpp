// EBNF front end: the dialect xgrammar accepts, which is a superset of
// llama.cpp's GBNF.
//
//   rule      ::= name "::=" "%unique_item"? choice lookahead?
//   choice    ::= sequence ("|" sequence)*
//   sequence  ::= (primary quantifier*)*       ends at "|", ")", a new "name ::=", or EOF
//   primary   ::= "..." | '...' | [class] | [^class] | name | "(" choice ")" | "."
//   quantifier::= "*" | "+" | "?" | "{" m "}" | "{" m "," "}" | "{" m "," n "}"
//   lookahead ::= "(=" choice ")"             (kept in the IR, not enforced)
//
// Escapes: \n \r \t \\ \" \' \[ \] \- \^ \/ \0 \b \f \v \e \xHH \uHHHH \UHHHHHHHH.
// Comments run from "#" to the end of the line.
//
// Parentheses nest at most kMaxEbnfNesting deep (the parser recurses once
// per level); deeper text is an error that names the depth and the limit.
#include <algorithm>
#include <cctype>
#include <unordered_map>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/utf8.h"

namespace brioche::grammar {
namespace {

// The deepest nesting of parentheses in EBNF text, outside strings, classes
// and comments (for the error message; the parser bounds its own recursion).
int ebnf_paren_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == '"' || c == '\'' || c == '[') {
      const char close = c == '[' ? ']' : c;
      for (++i; i < text.size() && text[i] != close; ++i)
        if (text[i] == '\\') ++i;
    } else if (c == '(') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ')' && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

class EbnfParser {
 public:
  EbnfParser(const std::string& text, Grammar& g) : text_(text), g_(g) {}

  void parse_all() {
    skip_space();
    while (pos_ < text_.size()) {
      size_t name_pos = pos_;
      std::string name = parse_name();
      if (name.empty()) error("a rule name", name_pos);
      skip_space();
      if (text_.compare(pos_, 3, "::=") != 0) error("'::=' after rule name '" + name + "'", pos_);
      pos_ += 3;
      int32_t rule = rule_for(name);
      if (g_.rules[rule].body >= 0) error("rule '" + name + "' defined only once", name_pos);
      defined_.resize(g_.rules.size(), false);
      defined_[rule] = true;
      skip_space();
      if (text_.compare(pos_, 12, "%unique_item") == 0) {
        g_.rules[rule].unique_item = true;
        pos_ += 12;
      }
      g_.rules[rule].body = parse_choice(/*nested=*/false);
      skip_space();
      if (text_.compare(pos_, 2, "(=") == 0) {
        enter_group(pos_);
        pos_ += 2;
        g_.rules[rule].lookahead = parse_choice(/*nested=*/true);
        expect(')');
        --nesting_;
      }
      skip_space();
    }
    defined_.resize(g_.rules.size(), false);
    for (size_t i = 0; i < g_.rules.size(); ++i)
      if (g_.rules[i].body < 0)
        fail("EBNF: rule '", g_.rules[i].name, "' is referenced (first at ", line_col(first_use_[i]),
             ") but never defined");
  }

 private:
  const std::string& text_;
  Grammar& g_;
  size_t pos_ = 0;
  int nesting_ = 0;  // open parentheses around pos_
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  std::unordered_map<std::string, int32_t> rule_index_;

  std::string line_col(size_t at) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return std::to_string(line) + ":" + std::to_string(col);
  }

  [[noreturn]] void error(const std::string& expected, size_t at) const {
    std::string found = at < text_.size() ? "'" + text_.substr(at, 12) + "'" : "end of input";
    fail("EBNF parse error at ", line_col(at), ": expected ", expected, ", found ", found);
  }

  void skip_space() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  static bool is_name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  }

  std::string parse_name() {
    size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    // A lone "." is the any-character primary, not a name.
    if (pos_ - start == 1 && text_[start] == '.') pos_ = start;
    return text_.substr(start, pos_ - start);
  }

  // A map, not Grammar::find_rule's scan: a grammar of many rules would
  // otherwise cost rules x references.
  int32_t rule_for(const std::string& name) {
    auto [it, added] = rule_index_.emplace(name, static_cast<int32_t>(g_.rules.size()));
    if (added) {
      g_.add_rule(name);
      first_use_.resize(g_.rules.size(), pos_);
    }
    return it->second;
  }

  // One more open parenthesis at `at`; the parser recurses once per level.
  void enter_group(size_t at) {
    if (++nesting_ > kMaxEbnfNesting)
      fail("EBNF: parentheses nest ", ebnf_paren_depth(text_), " deep (first past the limit at ", line_col(at),
           "); the limit is ", kMaxEbnfNesting);
  }

  void expect(char c) {
    skip_space();
    if (pos_ >= text_.size() || text_[pos_] != c) error(std::string("'") + c + "'", pos_);
    ++pos_;
  }

  // True when the upcoming text is `name ::=` (the start of the next rule).
  bool at_rule_start() {
    size_t save = pos_;
    std::string name = parse_name();
    skip_space();
    bool yes = !name.empty() && text_.compare(pos_, 3, "::=") == 0;
    pos_ = save;
    return yes;
  }

  int32_t parse_choice(bool nested) {
    std::vector<int32_t> alts{parse_sequence(nested)};
    skip_space();
    while (pos_ < text_.size() && text_[pos_] == '|') {
      ++pos_;
      alts.push_back(parse_sequence(nested));
      skip_space();
    }
    return g_.choice(std::move(alts));
  }

  int32_t parse_sequence(bool nested) {
    std::vector<int32_t> items;
    for (;;) {
      skip_space();
      if (pos_ >= text_.size()) break;
      char c = text_[pos_];
      if (c == '|' || c == ')') break;
      if (!nested && text_.compare(pos_, 2, "(=") == 0) break;
      if (!nested && at_rule_start()) break;
      int32_t item = parse_primary();
      items.push_back(parse_quantifiers(item));
    }
    return g_.sequence(std::move(items));
  }

  int32_t parse_quantifiers(int32_t item) {
    for (;;) {
      if (pos_ >= text_.size()) return item;
      char c = text_[pos_];
      if (c == '*') {
        ++pos_;
        item = g_.repeat(item, 0, -1);
      } else if (c == '+') {
        ++pos_;
        item = g_.repeat(item, 1, -1);
      } else if (c == '?') {
        ++pos_;
        item = g_.repeat(item, 0, 1);
      } else if (c == '{' || (c == '%' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '{')) {
        // {m,n}: a repetition; %{m,n}: the item's matches of m..n characters (Expr::Kind::kLengthBound).
        const bool length = c == '%';
        if (length) ++pos_;
        size_t at = pos_++;
        skip_space();
        int64_t lo = parse_int(at);
        int64_t hi = lo;
        skip_space();
        if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          skip_space();
          if (pos_ < text_.size() && text_[pos_] == '}') {
            hi = -1;
          } else if (pos_ < text_.size() && text_[pos_] == '-') {  // xgrammar prints {m, -1}
            ++pos_;
            if (parse_int(at) != 1) error("-1 or a count in the repetition", at);
            hi = -1;
          } else {
            hi = parse_int(at);
          }
        }
        expect('}');
        if (hi >= 0 && hi < lo) error("a repetition {m,n} with m <= n", at);
        if (lo > kMaxRepeatCount || hi > kMaxRepeatCount) error("a repetition count at most 2147483647", at);
        item = length ? g_.length_bound(item, static_cast<int32_t>(lo), static_cast<int32_t>(hi))
                      : g_.repeat(item, static_cast<int32_t>(lo), static_cast<int32_t>(hi));
      } else {
        return item;
      }
    }
  }

  int64_t parse_int(size_t at) {
    size_t start = pos_;
    int64_t v = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      v = v * 10 + (text_[pos_] - '0');
      if (v > kMaxRepeatCount) error("a repetition count at most 2147483647", at);
      ++pos_;
    }
    if (pos_ == start) error("a number in the repetition", pos_);
    return v;
  }

  int32_t parse_primary() {
    size_t at = pos_;
    char c = text_[pos_];
    if (c == '"' || c == '\'') return g_.bytes(parse_string(c));
    if (c == '[') return parse_class();
    if (c == '(') {
      enter_group(at);
      ++pos_;
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ')') {  // "()" is the empty sequence
        ++pos_;
        --nesting_;
        return g_.empty();
      }
      int32_t inner = parse_choice(/*nested=*/true);
      expect(')');
      --nesting_;
      return inner;
    }
    if (c == '.') {
      ++pos_;
      return g_.char_class({}, /*negated=*/true);  // any codepoint
    }
    std::string name = parse_name();
    if (name.empty()) error("a string, character class, group or rule name", at);
    return g_.rule_ref(rule_for(name));
  }

  uint32_t parse_hex(size_t digits, size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_])))
        error(std::to_string(digits) + " hex digits in the escape", at);
      char h = text_[pos_++];
      v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
    }
    return v;
  }

  // Reads one (possibly escaped) character as a codepoint. Raw non-ASCII
  // text is decoded from UTF-8.
  uint32_t parse_char() {
    size_t at = pos_;
    if (pos_ >= text_.size()) error("a character", at);
    unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c != '\\') {
      uint32_t cp;
      size_t len = decode_utf8(text_, pos_, &cp);
      if (len == 0) error("valid UTF-8", at);
      pos_ += len;
      return cp;
    }
    ++pos_;
    if (pos_ >= text_.size()) error("an escape after '\\'", at);
    char e = text_[pos_++];
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '0': return 0;
      case 'b': return '\b';
      case 'f': return '\f';
      case 'v': return '\v';
      case 'a': return '\a';
      case 'e': return 0x1b;
      case 'x': return parse_hex(2, at);
      case 'u': return parse_hex(4, at);
      case 'U': {
        const uint32_t cp = parse_hex(8, at);
        if (cp > 0x10FFFF) error("a codepoint at most U+10FFFF in \\U", at);
        return cp;
      }
      case '\\':
      case '"':
      case '\'':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
      case '.':
      case '*':
      case '+':
      case '?':
      case '(':
      case ')':
      case '{':
      case '}':
      case '|': return static_cast<unsigned char>(e);
      default: error("a known escape (\\n \\r \\t \\\\ \\\" \\xHH \\uHHHH ...)", at);
    }
  }

  std::string parse_string(char quote) {
    size_t at = pos_++;
    std::string out;
    for (;;) {
      if (pos_ >= text_.size()) error(std::string("closing ") + quote + " of the string", at);
      if (text_[pos_] == quote) {
        ++pos_;
        return out;
      }
      if (text_[pos_] == '\n') error(std::string("closing ") + quote + " before the end of line", pos_);
      append_utf8(out, parse_char());
    }
  }

  int32_t parse_class() {
    size_t at = pos_++;
    bool negated = false;
    if (pos_ < text_.size() && text_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    for (;;) {
      if (pos_ >= text_.size()) error("closing ']' of the character class", at);
      if (text_[pos_] == ']') {
        ++pos_;
        break;
      }
      uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) error("a character range lo-hi with lo <= hi", at);
      }
      ranges.emplace_back(lo, hi);
    }
    return g_.char_class(std::move(ranges), negated);
  }
};

}  // namespace

Grammar Grammar::from_ebnf(const std::string& text, const std::string& root_rule) {
  Grammar g;
  EbnfParser(text, g).parse_all();
  g.root = g.find_rule(root_rule);
  BRIOCHE_CHECK(g.root >= 0, "EBNF: expected a root rule named '", root_rule, "', found rules: ", [&] {
    std::string names;
    for (auto& r : g.rules) names += (names.empty() ? "" : ", ") + r.name;
    return names.empty() ? std::string("(none)") : names;
  }());
  return g;
}

}  // namespace brioche::grammar
