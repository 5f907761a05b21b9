// Grammar IR builders, printing, hashing, and the small front ends
// (choice lists, builtin JSON).
#include "grammar/grammar.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace brioche::grammar {

int32_t Grammar::add(Expr e) {
  e.depth = 1;
  for (int32_t c : e.children) e.depth = std::max(e.depth, exprs[c].depth + 1);
  BRIOCHE_CHECK(e.depth <= kMaxExpressionDepth, "grammar: an expression nests ", e.depth,
                " levels deep (groups, alternatives and repetitions inside each other); the limit is ",
                kMaxExpressionDepth);
  exprs.push_back(std::move(e));
  return static_cast<int32_t>(exprs.size() - 1);
}
int32_t Grammar::empty() { return add(Expr{}); }
int32_t Grammar::bytes(std::string b) {
  if (b.empty()) return empty();
  Expr e;
  e.kind = Expr::Kind::kBytes;
  e.bytes = std::move(b);
  return add(std::move(e));
}
int32_t Grammar::char_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
  Expr e;
  e.kind = Expr::Kind::kCharClass;
  e.ranges = std::move(ranges);
  e.negated = negated;
  return add(std::move(e));
}
int32_t Grammar::rule_ref(int32_t rule) {
  Expr e;
  e.kind = Expr::Kind::kRuleRef;
  e.rule = rule;
  return add(std::move(e));
}
int32_t Grammar::sequence(std::vector<int32_t> children) {
  if (children.size() == 1) return children[0];
  if (children.empty()) return empty();
  Expr e;
  e.kind = Expr::Kind::kSequence;
  e.children = std::move(children);
  return add(std::move(e));
}
int32_t Grammar::choice(std::vector<int32_t> children) {
  if (children.size() == 1) return children[0];
  BRIOCHE_CHECK(!children.empty(), "grammar: a choice needs at least one alternative");
  Expr e;
  e.kind = Expr::Kind::kChoice;
  e.children = std::move(children);
  return add(std::move(e));
}
int32_t Grammar::repeat(int32_t child, int32_t min_repeat, int32_t max_repeat) {
  BRIOCHE_CHECK(max_repeat < 0 || max_repeat >= min_repeat, "grammar: repetition {", min_repeat, ",", max_repeat,
                "} has max < min");
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.children = {child};
  e.min_repeat = min_repeat;
  e.max_repeat = max_repeat;
  return add(std::move(e));
}
int32_t Grammar::length_bound(int32_t child, int32_t min_items, int32_t max_items) {
  BRIOCHE_CHECK(max_items < 0 || max_items >= min_items, "grammar: length bound %{", min_items, ",", max_items,
                "} has max < min");
  Expr e;
  e.kind = Expr::Kind::kLengthBound;
  e.children = {child};
  e.min_repeat = min_items;
  e.max_repeat = max_items;
  return add(std::move(e));
}
int32_t Grammar::add_rule(std::string name) {
  rules.push_back(Rule{std::move(name), -1, -1});
  return static_cast<int32_t>(rules.size() - 1);
}
int32_t Grammar::find_rule(const std::string& name) const {
  for (size_t i = 0; i < rules.size(); ++i)
    if (rules[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

namespace {

void append_escaped_byte(std::string& out, unsigned char c, bool in_class) {
  switch (c) {
    case '\n': out += "\\n"; return;
    case '\r': out += "\\r"; return;
    case '\t': out += "\\t"; return;
    case '\\': out += "\\\\"; return;
    case '"': out += "\\\""; return;
    default: break;
  }
  if (in_class && (c == ']' || c == '-' || c == '^' || c == '[')) {
    out += '\\';
    out += static_cast<char>(c);
    return;
  }
  if (c < 0x20 || c == 0x7f) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
    return;
  }
  out += static_cast<char>(c);
}

void append_codepoint(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    append_escaped_byte(out, static_cast<unsigned char>(cp), true);
    return;
  }
  char buf[16];
  if (cp <= 0xFFFF)
    std::snprintf(buf, sizeof buf, "\\u%04x", cp);
  else
    std::snprintf(buf, sizeof buf, "\\U%08x", cp);
  out += buf;
}

void print_expr(const Grammar& g, int32_t id, std::string& out) {
  const Expr& e = g.exprs[id];
  switch (e.kind) {
    case Expr::Kind::kEmpty: out += "\"\""; break;
    case Expr::Kind::kBytes: out += ebnf_quote(e.bytes); break;
    case Expr::Kind::kCharClass:
      out += e.negated ? "[^" : "[";
      for (auto [lo, hi] : e.ranges) {
        append_codepoint(out, lo);
        if (hi != lo) {
          out += '-';
          append_codepoint(out, hi);
        }
      }
      out += ']';
      break;
    case Expr::Kind::kRuleRef: out += g.rules[e.rule].name; break;
    case Expr::Kind::kSequence:
    case Expr::Kind::kChoice: {
      out += '(';
      for (size_t i = 0; i < e.children.size(); ++i) {
        if (i) out += e.kind == Expr::Kind::kChoice ? " | " : " ";
        print_expr(g, e.children[i], out);
      }
      out += ')';
      break;
    }
    case Expr::Kind::kRepeat:
    case Expr::Kind::kLengthBound:
      out += '(';
      print_expr(g, e.children[0], out);
      out += ')';
      if (e.kind == Expr::Kind::kLengthBound) out += '%';
      if (e.max_repeat < 0)
        out += "{" + std::to_string(e.min_repeat) + ",}";
      else
        out += "{" + std::to_string(e.min_repeat) + "," + std::to_string(e.max_repeat) + "}";
      break;
  }
}

}  // namespace

std::string ebnf_quote(const std::string& utf8) {
  std::string out = "\"";
  for (unsigned char c : utf8) append_escaped_byte(out, c, false);
  out += '"';
  return out;
}

std::string Grammar::to_ebnf() const {
  std::string out;
  for (const Rule& r : rules) {
    out += r.name + " ::= ";
    if (r.unique_item) out += "%unique_item ";
    print_expr(*this, r.body, out);
    if (r.lookahead >= 0) {
      out += " (= ";
      print_expr(*this, r.lookahead, out);
      out += ")";
    }
    out += '\n';
  }
  return out;
}

uint64_t Grammar::content_hash() const {
  // FNV-1a over the canonical EBNF print plus the root name: two grammars
  // that print the same compile to the same automata.
  std::string text = to_ebnf();
  text += "\nroot=" + rules[root].name;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

Grammar Grammar::from_choices(const std::vector<std::string>& choices) {
  BRIOCHE_CHECK(!choices.empty(), "choice grammar: expected at least one choice, got an empty list");
  // Built directly as literals, so quotes, backslashes, newlines and other
  // control bytes need no escaping at all; to_ebnf() escapes when printing.
  Grammar g;
  int32_t root = g.add_rule("root");
  std::vector<int32_t> alts;
  for (const std::string& c : choices) alts.push_back(g.bytes(c));
  g.rules[root].body = g.choice(std::move(alts));
  g.root = root;
  return g;
}

namespace {

// The rules of any JSON value, with unbounded whitespace: the language of
// xgrammar's builtin grammar. The root rule is prepended by the caller.
const char* kJsonRules = R"(
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member ::= string ws ":" ws value
array ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" escape )* "\"" (= [ \t\n\r]* [,}\]:])
escape ::= ["\\/bfnrt] | "u" [0-9a-fA-F]{4}
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [+\-]? [0-9]+ )?
ws ::= [ \t\n\r]*
)";

}  // namespace

Grammar Grammar::builtin_json() { return from_ebnf(std::string("root ::= object | array") + kJsonRules, "root"); }

Grammar Grammar::builtin_json_object() {
  // OpenAI's json_object mode promises an object at the top level; the
  // other rules are the same text, so their masks are shared with
  // builtin_json's (prewarm_shared_masks computes them).
  return from_ebnf(std::string("root ::= object") + kJsonRules, "root");
}

}  // namespace brioche::grammar
