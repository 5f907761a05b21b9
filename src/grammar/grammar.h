// Grammar IR: a context-free grammar over Unicode text, and its front ends
// (EBNF/GBNF, JSON Schema, regex, choice lists, builtin JSON).
//
// The IR is an expression arena: a rule's body is an expression tree of
// literals, character classes, rule references, sequences, choices and
// bounded/unbounded repetitions. The automaton builder (automaton.h) lowers
// it to byte-level per-rule automata; the compiler and matcher work there.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace brioche::grammar {

// Nesting bounds of the front ends and the IR. The parsers and the walkers
// over expression trees recurse once per level; with these bounds the
// deepest accepted input needs well under 1 MiB of stack (a server may
// compile on threads with small stacks; tests/grammar/limits_test.cpp runs
// the deepest inputs on a 1 MiB thread). Deeper input is a brioche::Error
// that names the depth found and the limit.
inline constexpr int kMaxRegexNesting = 256;      // groups, and quantifiers stacked on one atom
inline constexpr int kMaxEbnfNesting = 1024;      // parentheses (a regex level becomes up to 3)
inline constexpr int kMaxExpressionDepth = 2048;  // IR nodes inside each other (groups, choices, repetitions)
inline constexpr int kMaxSchemaDepth = 128;       // sub-schemas inside each other, $ref hops included
// x{m,n} counts: larger ones are counted, not unrolled (AutomatonLimits::counter_window).
inline constexpr int64_t kMaxRepeatCount = 2147483647;
// Rules inlined into their callers may nest this deep (inlining adds the
// callee's depth to the caller's walk).
inline constexpr int kMaxInlineDepth = 256;

// One node of the expression arena. Children are arena indices.
struct Expr {
  enum class Kind : uint8_t {
    kEmpty,      // matches ""
    kBytes,      // literal byte string (UTF-8 of the source text)
    kCharClass,  // one Unicode codepoint in (or, negated, not in) `ranges`
    kRuleRef,    // another rule, by index
    kSequence,   // children in order
    kChoice,     // any one child
    kRepeat,     // child repeated min..max times (max < 0: unbounded)
    // child's matches that read min..max items (max < 0: unbounded), an
    // item being one character class or one literal matched: one count over
    // the whole child, e.g. a pattern's characters under maxLength
    // (EBNF `(child)%{m,n}`; lowered in automaton.cpp as child x counter)
    kLengthBound,
  };
  Kind kind = Kind::kEmpty;
  std::string bytes;                                  // kBytes
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kCharClass, inclusive codepoints
  bool negated = false;                               // kCharClass
  int32_t rule = -1;                                  // kRuleRef
  std::vector<int32_t> children;                      // kSequence, kChoice, kRepeat, kLengthBound (1 child)
  int32_t min_repeat = 0, max_repeat = -1;            // kRepeat, kLengthBound
  int32_t depth = 1;  // 1 + the deepest child (set by Grammar::add; <= kMaxExpressionDepth)
};

struct Rule {
  std::string name;
  int32_t body = -1;       // expression index
  int32_t lookahead = -1;  // optional lookahead assertion (parsed, kept, not enforced)
  // An item of an array whose items must differ (JSON Schema uniqueItems;
  // EBNF `name ::= %unique_item body`): each value this rule matches is
  // compared, as JSON, with the values the earlier calls made from the same
  // caller frame matched, and a repeat is rejected (the matcher checks it
  // at run time: unique_items.h). The rule is never inlined, nor is a rule
  // that calls it (the frame that holds the values seen must be its own).
  bool unique_item = false;
};

// Options for the JSON Schema front end.
struct SchemaOptions {
  // true: any JSON whitespace between tokens, at most `max_whitespace` in a
  // row (a run bound keeps a model from looping on blanks). false: compact
  // fixed separators `, ` and `: ` with no whitespace choice points.
  bool any_whitespace = true;
  int max_whitespace = 20;  // <= 0: unbounded (xgrammar's default)
  // strict: objects allow only the listed properties unless
  // additionalProperties says otherwise; arrays allow only the listed items.
  bool strict = true;
  // oneOf whose branches are not proven disjoint (schema_one_of.cpp):
  // false refuses it with its pointer (every compiled schema is exact);
  // true compiles their union, which also admits a document matching two
  // branches (the server's non-strict requests: better than unconstrained).
  bool one_of_as_any_of = false;
  // uniqueItems: true where the grammar cannot enforce it (items other than
  // a small set of enum/const/boolean values; schema_arrays.cpp): false
  // refuses it with its pointer; true drops it, so an array may repeat an
  // item (the server's non-strict requests: better than unconstrained).
  bool unique_items_approximate = false;
};

class Grammar {
 public:
  std::vector<Expr> exprs;
  std::vector<Rule> rules;
  int32_t root = 0;

  // Front ends. All throw brioche::Error with what was expected, what was
  // found and where (line:column, JSON pointer, or pattern offset).
  static Grammar from_ebnf(const std::string& text, const std::string& root_rule = "root");
  static Grammar from_json_schema(const nlohmann::ordered_json& schema, const SchemaOptions& options = {});
  static Grammar from_json_schema(const std::string& schema_text, const SchemaOptions& options = {});
  static Grammar from_regex(const std::string& pattern);
  static Grammar from_choices(const std::vector<std::string>& choices);
  static Grammar builtin_json();         // any JSON object or array (xgrammar's builtin)
  static Grammar builtin_json_object();  // any JSON object: OpenAI's json_object mode

  // EBNF text that parses back (from_ebnf) to an equivalent grammar.
  std::string to_ebnf() const;

  // Stable content hash (for the compiled-grammar cache).
  uint64_t content_hash() const;

  // Arena builders. add() computes the node's depth and throws when it
  // passes kMaxExpressionDepth, so no walker meets a deeper tree.
  int32_t add(Expr e);
  int32_t empty();
  int32_t bytes(std::string b);
  int32_t char_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated);
  int32_t rule_ref(int32_t rule);
  int32_t sequence(std::vector<int32_t> children);
  int32_t choice(std::vector<int32_t> children);
  int32_t repeat(int32_t child, int32_t min_repeat, int32_t max_repeat);
  int32_t length_bound(int32_t child, int32_t min_items, int32_t max_items);
  int32_t add_rule(std::string name);                // body left unset
  int32_t find_rule(const std::string& name) const;  // -1 if absent
};

// EBNF escaping helpers shared by the text-emitting front ends.
std::string ebnf_quote(const std::string& utf8);  // "..." literal with escapes

// JSON Schema -> EBNF text (what from_json_schema parses), for inspection.
std::string json_schema_to_ebnf(const nlohmann::ordered_json& schema, const SchemaOptions& options = {});
// Regex -> EBNF expression text (no rule header); used by schema `pattern`.
std::string regex_to_ebnf_expr(const std::string& pattern, bool inside_json_string);

}  // namespace brioche::grammar
