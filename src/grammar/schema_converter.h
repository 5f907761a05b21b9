// The JSON Schema -> EBNF converter behind Grammar::from_json_schema
// (grammar.h), shared by the files that implement it, one concern each:
//
//   json_schema.cpp        rule names, basic JSON rules, $ref, the keyword
//                          dispatch (visit), allOf/anyOf merges, the API
//   schema_exclusion.cpp   `not`, and the string-exclusion tries (keys that
//                          differ from the declared ones, values that are
//                          none of an excluded list)
//   schema_numbers.cpp     integer/number ranges and multipleOf
//   schema_strings.cpp     pattern, format, minLength/maxLength
//   schema_arrays.cpp      items, prefixItems, minItems/maxItems
//   schema_objects.cpp     properties, required, additionalProperties,
//                          min/maxProperties, patternProperties, propertyNames
//   schema_one_of.cpp      whether oneOf's branches are disjoint (then it
//                          is their union, exactly)
//   schema_conditionals.cpp  dependentRequired, dependentSchemas,
//                          dependencies, if/then/else (as case splits)
//
// Internal to src/grammar/: nothing outside includes it.
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/regex_dfa.h"
#include "grammar/schema_formats.h"

namespace brioche::grammar::schema {

using Json = nlohmann::ordered_json;

// Keys longer than this are clipped in JSON pointers (messages only) and
// rule-name hints, so a deep schema with long keys does not build strings
// of depth x key length at every level.
inline constexpr size_t kMaxNameChars = 64;

// Whether `keyword` constrains nothing the converter must enforce (JSON
// Schema: unknown keywords are annotations).
bool is_annotation(const std::string& keyword);
// ptr + "/" + key, escaped as a JSON pointer (~0, ~1), long keys clipped.
std::string pointer_child(const std::string& ptr, const std::string& key);
// A rule-name fragment: [A-Za-z0-9_], not starting with a digit, clipped.
std::string sanitize(const std::string& s);

class SchemaConverter {
 public:
  SchemaConverter(const Json& root, const SchemaOptions& opt) : root_(root), opt_(opt) {
    if (opt_.any_whitespace)
      ws_ = opt_.max_whitespace > 0 ? "[ \\n\\r\\t]{0," + std::to_string(opt_.max_whitespace) + "}" : "[ \\n\\r\\t]*";
  }

  // The EBNF text of the whole schema (root rule first); throws
  // brioche::Error naming the keyword and its JSON pointer.
  std::string convert();

 private:
  const Json& root_;
  SchemaOptions opt_;
  std::string ws_;  // empty when !any_whitespace
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_{"root"};
  std::map<std::string, std::string> ref_rules_;  // $ref -> rule name
  // Subschemas a $ref may name other than by a pointer from the root: by
  // `$anchor` or a plain-name `$id`/`id` ("#name"), and by an `$id` URI
  // (the root's own included). Built on the first such $ref.
  std::map<std::string, const Json*> anchors_, ids_;
  bool ids_indexed_ = false;
  // visit_string's rule per string keywords (format, pattern, minLength,
  // maxLength as JSON): a repeated pattern is converted, and its regex
  // DFAs built, once per schema.
  std::map<std::string, std::string> string_rules_;
  std::set<std::string> basics_;
  std::string key_rest_;                    // rule name of an excluded key's free rest, once made
  std::string value_rest_;                  // the same for an excluded value
  std::map<std::string, int> next_suffix_;  // per name base: the next _N to try in fresh()
  size_t ebnf_bytes_ = 0;                   // rule text so far (bounded by kMaxSchemaEbnfBytes)
  int depth_ = 0;                           // visit() calls open: nesting plus $ref hops
  std::string where_;                       // pointer of the innermost open visit (for type errors)

  [[noreturn]] void unsupported(const std::string& keyword, const std::string& ptr, const std::string& why) {
    fail("JSON schema: unsupported '", keyword, "' at ", ptr.empty() ? "#" : "#" + ptr, ": ", why);
  }

  // Whitespace-aware separators.
  std::string ws() const { return ws_.empty() ? "" : " " + ws_ + " "; }
  std::string comma() const { return ws_.empty() ? "\", \"" : ws() + "\",\"" + ws(); }
  std::string colon() const { return ws_.empty() ? "\": \"" : ws() + "\":\"" + ws(); }
  std::string open(char c) const { return std::string("\"") + c + "\"" + ws(); }
  std::string close(char c) const { return ws() + "\"" + c + "\""; }

  static std::string literal(const Json& v) { return ebnf_quote(v.dump()); }
  // What may follow a string: blanks, then one of , } ] :
  std::string string_lookahead() const { return "(= " + (ws_.empty() ? "" : ws_ + " ") + "[,}\\]:])"; }

  // Bounds the converter's recursion: one level per nested sub-schema and
  // per $ref hop (a chain of $refs nests like a chain of properties).
  struct VisitScope {
    SchemaConverter& c;
    std::string saved_where;
    int unwinding = std::uncaught_exceptions();  // where_ stays at the failing schema while an error unwinds
    VisitScope(SchemaConverter& converter, const std::string& ptr) : c(converter), saved_where(converter.where_) {
      if (++c.depth_ > kMaxSchemaDepth)
        fail("JSON schema: sub-schemas nest more than ", kMaxSchemaDepth, " deep at ", ptr.empty() ? "#" : "#" + ptr,
             " ($ref hops count as levels); the limit is ", kMaxSchemaDepth);
      c.where_ = ptr;
    }
    ~VisitScope() {
      --c.depth_;
      if (std::uncaught_exceptions() == unwinding) c.where_ = std::move(saved_where);
    }
  };

  struct TrieNode {
    std::map<uint32_t, int> kids;  // codepoint -> node
    bool terminal = false;         // a whole text ends here
  };

  using Bound = NumberBound;

  // json_schema.cpp
  std::string convert_unchecked();
  std::string fresh(const std::string& hint);
  std::string add_rule(const std::string& hint, const std::string& body);
  void count_text(size_t bytes);
  std::string basic(const std::string& name);
  std::string string_rule(const std::string& hint, const std::string& content);
  // schema_refs.cpp
  const Json& resolve(const std::string& ref, const std::string& ptr);
  const Json& resolve_pointer(const Json& base, const std::string& ref, size_t pos, const std::string& ptr);
  void index_ids(const Json& s, int depth);
  void refuse_nested_pointers(const Json& s, const std::string& ptr, int depth, const std::string& resource);
  std::string visit(const Json& s, const std::string& ptr, const std::string& hint_in);
  std::optional<Json> ref_with_siblings(const Json& s) const;
  bool ref_replaces_schema() const;
  // False for a format that a later draft than the root's defines (absent
  // $schema: 2020-12, which defines them all).
  bool format_in_draft(const std::string& f) const;
  int64_t count_of(const Json& s, const char* key, const std::string& ptr, int64_t fallback);
  Json merge_siblings(const Json& parent, const Json& branch, const char* key);
  Json merge_all_of(const Json& s, const std::string& ptr);
  Json both_values(const Json& a, const Json& b, const std::string& ptr);
  static bool only_true(const Json& s);
  std::string visit_type(const Json& s, const std::string& type, const std::string& ptr, const std::string& hint);

  // schema_arrays.cpp
  std::string visit_unique_array(const Json& s, const std::string& ptr, const std::string& hint);
  // The distinct values an array with uniqueItems may hold, each with its
  // spellings (values equal as JSON, e.g. 1 and 1.0, are one element), when
  // the grammar can write its items as a set; else false and `why`.
  bool unique_item_domain(const Json& s, std::vector<std::vector<Json>>& domain, std::string& why);

  // schema_exclusion.cpp
  std::string visit_not(const Json& s, const std::string& ptr, const std::string& hint);
  static bool has_type(const Json& v, const std::string& t);
  std::vector<std::string> type_list(const Json& t, const std::string& ptr);
  std::string excluded_key(const std::vector<std::string>& keys);
  template <class NodeRule>
  std::string trie_rules(const std::vector<std::string>& texts, NodeRule node_rule);
  std::string excluded_value(const std::vector<std::string>& values);

  // schema_numbers.cpp
  Bound bound(const Json& s, const char* inclusive, const char* exclusive, const std::string& ptr);
  std::optional<int64_t> integer_multiple(const Json& s, const std::string& ptr, bool integer_type, int* decimals);
  std::string multiple_of_integer(int64_t k, const std::string& hint);
  std::string visit_integer(const Json& s, const std::string& ptr, const std::string& hint);
  std::string visit_number(const Json& s, const std::string& ptr, const std::string& hint);

  // schema_strings.cpp
  static std::string search_pattern(const std::string& p);
  // The pattern's strings of lo..hi characters as a regex of one-character
  // atoms, or nullopt when the pattern is not of that shape.
  std::optional<std::string> length_bounded_atoms(const std::string& pattern, int64_t lo, int64_t hi,
                                                  const std::string& ptr);
  std::string pattern_ebnf(const std::string& regex, const std::string& ptr);  // inside a JSON string
  std::string format_with_length(const Json& s, const std::string& f, const std::string& body, const std::string& ptr,
                                 const std::string& hint);
  // A pattern with assertions (lookahead, \b, anchors inside it) within
  // lo..hi characters (hi < 0: no upper bound): its DFA (regex_dfa.h) as one
  // expression under `%{lo,hi}` when it is a tree of repetitions, else one
  // rule per state (the bounds counted in the DFA); returns the string rule.
  std::string assertion_pattern(const std::string& pattern, int64_t lo, int64_t hi, const std::string& ptr,
                                const std::string& hint);
  std::string visit_string(const Json& s, const std::string& ptr, const std::string& hint);
  std::string convert_string(const Json& s, const std::string& ptr, const std::string& hint);  // visit_string's work
  // A format and a pattern on one string: the format's strings the pattern
  // finds a match in (formats of a regular language: format_regex).
  std::string format_and_pattern(const Json& s, const std::string& f, const std::string& ptr, const std::string& hint);
  // The strings of format: regex the grammar writes (valid Python regexes).
  // format: regex; with a pattern `^P.+S$` / `^P.*S$` (P, S literal
  // characters): the written regexes wrapped in P and S.
  struct RegexWrap {
    std::string prefix, suffix;
    bool nonempty = false;
  };
  std::string regex_format_rule(const std::string& hint, const RegexWrap& wrap);
  // One rule per state of a DFA over a JSON string's characters (escapes
  // offered for those JSON escapes); returns the start state's rule.
  std::string dfa_rules(const RegexDfa& dfa, const std::string& hint);
  // A JSON string rule of the DFA's strings: one expression when it fits, else dfa_rules.
  std::string dfa_string_rule(const RegexDfa& dfa, const std::string& hint);

  // schema_arrays.cpp
  std::string visit_array(const Json& s, const std::string& ptr, const std::string& hint);

  // schema_conditionals.cpp
  static bool has_conditional(const Json& s);
  static bool conditions_only(const Json& parts);
  static bool nested_object_test(const Json& t);
  static bool object_schema(const Json& s);
  static std::string conditional_keyword(const Json& s);
  static bool can_have(const Json& s, const std::string& key);
  static bool object_impossible(const Json& s);
  std::optional<Json> intersect_schemas(const Json& a, const Json& b, const std::string& ptr);
  Json value_schema_of(const Json& s, const std::string& key, const std::string& ptr);
  std::optional<Json> merge_object(Json s, const Json& extra, const std::string& keyword, const std::string& ptr);
  std::vector<Json> split_conditionals(const Json& s, const std::string& ptr);
  std::vector<Json> split_one_conditional(Json s, const std::string& ptr);
  std::string visit_conditional(const Json& s, const std::string& ptr, const std::string& hint);
  std::string visit_array_conditional(const Json& s, const std::string& ptr, const std::string& hint);

  // schema_one_of.cpp
  const Json& follow_refs(const Json& s, const std::string& ptr);
  unsigned possible_types(const Json& s, const std::string& ptr, int depth);
  bool provably_disjoint(const Json& a, const Json& b, const std::string& ptr, int depth);
  // oneOf's branches with each branch that is only a oneOf of proven
  // disjoint branches (itself or through $refs) replaced by those branches,
  // each with the index of the branch it came from.
  std::vector<std::pair<size_t, Json>> flatten_one_of(const std::vector<Json>& branches, const std::string& ptr,
                                                      int depth);
  // oneOf's branches with every JSON type that two branches admit whole
  // (null in {"type": ["string", "null"]} and {"type": ["number", "null"]})
  // taken out of all of them: oneOf rejects each value of such a type. The
  // branches that admit nothing else are dropped (original index kept).
  std::vector<std::pair<size_t, Json>> drop_shared_types(const std::vector<Json>& branches, const std::string& ptr);
  // An object schema whose oneOf branches only list `required` keys (AWS
  // CloudFormation's "exactly one of these"): the object shapes in which
  // exactly one branch's keys are all present, each as a plain schema
  // (those keys required, the other branches' missing keys forbidden);
  // nullopt when `s` is not of that form or the shapes are too many.
  std::optional<std::vector<Json>> one_of_required_shapes(const Json& s, const std::string& ptr);
  // What a oneOf branch of presence tests reads: keys, and (key, schema)
  // value atoms whose "does not match" side is complement_schema's.
  struct PresenceAtoms {
    std::vector<std::string> keys;
    std::vector<std::pair<std::string, Json>> values;
  };
  bool presence_keys(const Json& s, const Json& b, PresenceAtoms& atoms, const std::string& ptr, int depth);
  static bool presence_holds(const Json& b, const PresenceAtoms& atoms, uint32_t bits);
  std::optional<Json> complement_schema(const Json& s, const std::string& ptr);
  // oneOf whose object branches are closed (additionalProperties false, no
  // required) and agree on the properties they share: each branch keeps the
  // objects no other branch admits (at least one key another lacks); the
  // rest must be proven disjoint from everything. nullopt when not of that form.
  std::optional<std::vector<std::pair<size_t, Json>>> exclusive_closed_objects(
      const std::vector<std::pair<size_t, Json>>& branches, const std::string& ptr);

  // schema_objects.cpp
  std::string visit_object(const Json& s, const std::string& ptr, const std::string& hint);
  // A patternProperties entry: the keys its pattern finds a match in.
  struct KeyPattern {
    std::string pattern;
    Json schema;
    std::string ptr;
    RegexDfa keys;
  };
  std::vector<KeyPattern> key_patterns(const Json& s, const std::string& ptr);
  // One schema for a value that must match `a` and `b` (false: none can);
  // refused under `keyword` at ptr, saying `what`, when they do not merge.
  Json both_schemas(const Json& a, const Json& b, const std::string& keyword, const std::string& ptr,
                    const std::string& what);
  // unevaluatedProperties (in `s`) as additionalProperties of the schema
  // merged with what it applies in place; refused where that is not exact.
  Json close_unevaluated(const Json& s, const std::string& ptr);
  // Conditions beside a type list of object and other types
  // (schema_conditions_by_type.cpp): the object case as visit_conditional
  // splits it, each other type with the conditions decided for all its
  // values (holds_on_type: whether x holds on every value of JSON type t,
  // not object; nullopt when it depends on the value).
  std::string visit_conditional_by_type(const Json& s, const std::string& ptr, const std::string& hint);
  std::optional<bool> holds_on_type(const Json& x, const std::string& t, const std::string& ptr);
  // propertyNames beside declared keys (schema_property_names.cpp), read as
  // a language of keys: enum/const values, a pattern, not {pattern} and
  // length bounds; anything else is refused.
  struct KeyNames {
    std::optional<std::vector<std::string>> values;  // enum/const: only these
    std::optional<RegexDfa> pattern, excluded;       // must match / must not match
    std::optional<std::string> excluded_pattern;
    int64_t min_length = 0, max_length = -1;
  };
  KeyNames key_names(const Json& s, const std::string& ptr);
  bool key_name_admitted(const KeyNames& names, const std::string& key, const std::string& ptr);
  // The key of an added member: a name admitted and none of `declared`; ""
  // when no such key exists.
  std::string key_names_except(const KeyNames& names, const std::vector<std::string>& declared, const std::string& ptr,
                               const std::string& hint);
  // The members an object may add besides its declared keys `names` when
  // patternProperties are given: one kind of key per set of patterns it
  // matches (and additionalProperties for none); "" when none may be added.
  std::string pattern_members(const std::vector<KeyPattern>& patterns, const std::vector<std::string>& names,
                              const Json& additional, const std::string& ptr, const std::string& hint);
};

}  // namespace brioche::grammar::schema
