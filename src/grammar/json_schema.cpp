// JSON Schema -> EBNF text -> Grammar.
//
// The language follows xgrammar's converter (the oracle our tests compare
// against): properties in declaration order, optional ones skippable,
// additional properties after the declared ones with keys that differ from
// every declared key, strict mode by default. Whitespace between tokens is
// `[ \n\r\t]{0,N}` (any_whitespace) or the fixed separators ", " / ": ".
// Unsupported keywords fail with the keyword and its JSON pointer.
//
// Bounds (each a brioche::Error naming the limit): sub-schemas nest at most
// kMaxSchemaDepth deep, $ref hops included (the converter recurses once per
// level); the EBNF grows to at most kMaxSchemaEbnfBytes; long keys are
// clipped in rule names and pointers. Chains that could be as long as the
// schema (prefixItems tails, members after property i, key tries) are built
// in loops, not by recursion.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/json_limits.h"
#include "grammar/schema_converter.h"

namespace brioche::grammar::schema {

// The EBNF of one schema grows linearly with it, except where keywords
// multiply rules (min/maxProperties: one rule per member and count); this
// bounds the text, and with it the conversion's time and memory.
constexpr size_t kMaxSchemaEbnfBytes = 16u << 20;

// Keywords that describe but do not constrain; skipped silently.
// Validation keywords of JSON Schema (drafts 4 to 2020-12) that constrain
// documents and that the converter does not enforce: a schema using one is
// refused rather than answered with documents that may break it.
const std::set<std::string> kConstrainingUnsupported = {"contains",         "minContains",     "maxContains",
                                                        "uniqueItems",      "additionalItems", "unevaluatedProperties",
                                                        "unevaluatedItems", "$dynamicRef",     "$recursiveRef"};

// Keywords the converter handles (per type, checked in visit_*).
// Every other keyword is an annotation (JSON Schema: unknown keywords are
// annotations): title, description, examples, draft-04's id, vendor
// extensions such as x-kubernetes-*, hyper-schema's links, and misspelled or
// private keys constrain nothing, and are ignored.
const std::set<std::string> kHandled = {"type",
                                        "properties",
                                        "required",
                                        "additionalProperties",
                                        "enum",
                                        "const",
                                        "anyOf",
                                        "oneOf",
                                        "allOf",
                                        "$ref",
                                        "items",
                                        "prefixItems",
                                        "minItems",
                                        "maxItems",
                                        "minLength",
                                        "maxLength",
                                        "pattern",
                                        "format",
                                        "minimum",
                                        "maximum",
                                        "exclusiveMinimum",
                                        "exclusiveMaximum",
                                        "nullable",
                                        "minProperties",
                                        "maxProperties",
                                        "patternProperties",
                                        "propertyNames",
                                        "multipleOf",
                                        "not",
                                        "if",
                                        "then",
                                        "else",
                                        "dependencies",
                                        "dependentRequired",
                                        "dependentSchemas"};

bool is_annotation(const std::string& keyword) {
  return !kHandled.count(keyword) && !kConstrainingUnsupported.count(keyword);
}

std::string pointer_child(const std::string& ptr, const std::string& key) {
  std::string k;
  for (char c : key.size() <= kMaxNameChars ? key : key.substr(0, kMaxNameChars - 3) + "...") {
    if (c == '~')
      k += "~0";
    else if (c == '/')
      k += "~1";
    else
      k += c;
  }
  return ptr + "/" + k;
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "r_" + out;
  if (out.size() > kMaxNameChars) out.resize(kMaxNameChars);
  return out;
}

std::string SchemaConverter::convert() {
  try {
    return convert_unchecked();
  } catch (const nlohmann::json::exception& e) {
    // A keyword of the wrong JSON type (e.g. "$ref": 5) read with get<>().
    fail("JSON schema: at ", where_.empty() ? "#" : "#" + where_, ": a keyword has the wrong JSON type (", e.what(),
         ")");
  }
}

std::string SchemaConverter::convert_unchecked() {
  refuse_nested_pointers(root_, "", 0, "");
  std::string body = visit(root_, "", "root");
  std::string out = "root ::= " + body + "\n";
  for (auto& [name, text] : rules_) out += name + " ::= " + text + "\n";
  return out;
}

// A rule name not used yet: the hint, else hint_1, hint_2, ... (the next
// suffix per base is remembered: many rules share a base, e.g. x_rest).
std::string SchemaConverter::fresh(const std::string& hint) {
  std::string base = sanitize(hint), name = base;
  int& next = next_suffix_[base];
  if (next == 0)
    next = 1;
  else
    name = base + "_" + std::to_string(next++);
  while (names_.count(name)) name = base + "_" + std::to_string(next++);
  names_.insert(name);
  return name;
}

std::string SchemaConverter::add_rule(const std::string& hint, const std::string& body) {
  std::string name = fresh(hint);
  count_text(name.size() + body.size());
  rules_.emplace_back(name, body);
  return name;
}

void SchemaConverter::count_text(size_t bytes) {
  ebnf_bytes_ += bytes;
  if (ebnf_bytes_ > kMaxSchemaEbnfBytes)
    fail("JSON schema: its grammar grows past ", kMaxSchemaEbnfBytes >> 20, " MiB of EBNF (at ",
         where_.empty() ? "#" : "#" + where_, "); the limit is ", kMaxSchemaEbnfBytes >> 20,
         " MiB: simplify the schema (fewer properties under min/maxProperties, smaller enums)");
}

// Shared building blocks, emitted once when first used.
std::string SchemaConverter::basic(const std::string& name) {
  if (basics_.insert(name).second) {
    names_.insert(name);
    std::string body;
    if (name == "json_escape")
      body = "[\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9]{4}";
    else if (name == "json_char")
      body = "[^\"\\\\\\x00-\\x1f] | \"\\\\\" " + basic("json_escape");
    else if (name == "json_string")
      // The lookahead (what may follow a string: blanks then , } ] or :)
      // lets the compiler decide tokens that run past the closing quote.
      body = "\"\\\"\" (" + basic("json_char") + ")* \"\\\"\" " + string_lookahead();
    else if (name == "json_integer")
      body = "\"0\" | \"-\"? [1-9] [0-9]*";
    else if (name == "json_number")
      body = "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+\\-]? [0-9]+)?";
    else if (name == "json_boolean")
      body = "\"true\" | \"false\"";
    else if (name == "json_null")
      body = "\"null\"";
    else if (name == "json_value")
      body = basic("json_number") + " | " + basic("json_string") + " | " + basic("json_boolean") + " | " +
             basic("json_null") + " | " + basic("json_array") + " | " + basic("json_object");
    else if (name == "json_array")
      body = open('[') + basic("json_value") + " (" + comma() + basic("json_value") + ")*" + close(']') + " | " +
             open('[') + "\"]\"";
    else if (name == "json_object")
      body = open('{') + basic("json_string") + colon() + basic("json_value") + " (" + comma() + basic("json_string") +
             colon() + basic("json_value") + ")*" + close('}') + " | " + open('{') + "\"}\"";
    else
      fail("internal: unknown basic rule ", name);
    rules_.emplace_back(name, body);
  }
  return name;
}

// A JSON string rule whose content (between the quotes) is `content`. It
// carries json_string's lookahead (a string is followed by blanks and one
// of , } ] :), which keeps it a rule of its own: the compiler can decide
// tokens that run past the closing quote, and the rule's masks are shared
// by every grammar with the same content (e.g. a format).
std::string SchemaConverter::string_rule(const std::string& hint, const std::string& content) {
  return add_rule(hint, "\"\\\"\" " + content + " \"\\\"\" " + string_lookahead());
}

// Keywords beside $ref: drafts 4 to 7 ignore them (the reference replaces
// the schema); from 2019-09 on, and so in a schema that names no draft (read
// as the latest), they apply with it, as an allOf of the reference and the
// rest. The schema as it is to be read, or nullopt where it reads as it is
// (nothing but annotations beside the reference).
std::optional<Json> SchemaConverter::ref_with_siblings(const Json& s) const {
  Json rest = s;
  rest.erase("$ref");
  bool constrains = false;
  for (auto& [k, v] : rest.items()) constrains = constrains || !is_annotation(k);
  if (!constrains) return std::nullopt;
  if (ref_replaces_schema()) return Json{{"$ref", s["$ref"]}};
  return Json{{"allOf", Json::array({Json{{"$ref", s["$ref"]}}, std::move(rest)})}};
}

// Whether the root names draft 3, 4, 6 or 7 in $schema.
bool SchemaConverter::ref_replaces_schema() const {
  if (!root_.is_object() || !root_.contains("$schema") || !root_["$schema"].is_string()) return false;
  const std::string uri = root_["$schema"].get<std::string>();
  for (const char* draft : {"draft-03", "draft-04", "draft-06", "draft-07"})
    if (uri.find(draft) != std::string::npos) return true;
  return false;
}

std::string SchemaConverter::visit(const Json& s, const std::string& ptr, const std::string& hint_in) {
  VisitScope scope(*this, ptr);
  const std::string hint = hint_in.size() <= kMaxNameChars ? hint_in : hint_in.substr(0, kMaxNameChars);
  if (s.is_boolean()) {
    if (s.get<bool>()) return basic("json_value");
    unsupported("false", ptr, "the schema 'false' matches nothing");
  }
  if (!s.is_object()) unsupported("schema", ptr, "expected an object or boolean, found " + s.dump());
  if (s.contains("unevaluatedProperties")) return visit(close_unevaluated(s, ptr), ptr, hint);
  for (auto& [k, v] : s.items())
    if (kConstrainingUnsupported.count(k) && k != "uniqueItems")
      unsupported(k, ptr,
                  "a context-free grammar cannot enforce it here; expected only the keywords listed in "
                  "docs/grammar.md (remove it or rewrite the schema without it)");
  if (s.contains("$ref")) {
    if (const std::optional<Json> read = ref_with_siblings(s)) return visit(*read, ptr, hint);
  }
  // uniqueItems: true constrains arrays only. A schema whose types exclude
  // arrays, or whose maxItems is at most 1, ignores it; visit_array enforces
  // it (a set of a few values, else a run-time check), anyOf/oneOf/allOf
  // take it into their branches; beside $ref, const, enum, not or the
  // conditionals, or with no type at all (any value), it is refused, or
  // dropped with SchemaOptions::unique_items_approximate.
  if (s.contains("uniqueItems") && s["uniqueItems"] != false) {
    if (!s["uniqueItems"].is_boolean()) unsupported("uniqueItems", ptr, "expected a boolean");
    const bool types_exclude_arrays =
        s.contains("type") && !(s["type"] == "array") &&
        !(s["type"].is_array() && std::find(s["type"].begin(), s["type"].end(), Json("array")) != s["type"].end());
    // With maxItems 0 or 1 no two items can be equal: the keyword holds always.
    const bool at_most_one = s.contains("maxItems") && s["maxItems"].is_number() && s["maxItems"].get<double>() <= 1;
    const bool split = s.contains("anyOf") || s.contains("oneOf") || s.contains("allOf");
    const bool an_array = s.contains("type") || s.contains("items") || s.contains("prefixItems") ||
                          s.contains("minItems") || s.contains("maxItems");
    std::string beside;
    for (const char* k : {"$ref", "const", "enum", "not", "if", "dependentSchemas", "dependencies"})
      if (s.contains(k)) beside = k;
    const bool enforced = split || (beside.empty() && an_array);
    if (types_exclude_arrays || at_most_one || (!enforced && opt_.unique_items_approximate)) {
      Json rest = s;
      rest.erase("uniqueItems");
      return visit(rest, ptr, hint);
    }
    if (!enforced)
      unsupported("uniqueItems", ptr,
                  beside.empty() ? "expected an array schema (\"type\": \"array\" or items): any value is not "
                                   "checked for repeated items"
                                 : "expected no '" + beside + "' beside it (its arrays would not be checked)");
  }

  // Beside anyOf/oneOf, `not` goes down into every branch (merge_siblings).
  if (s.contains("not") && !s.contains("anyOf") && !s.contains("oneOf")) return visit_not(s, ptr, hint);
  // Conditional object keywords split the schema into plain ones (beside
  // anyOf/oneOf they go into each branch, beside allOf into the merge).
  // (An allOf of conditions only on an object schema is split the same way.)
  if (has_conditional(s) && !s.contains("anyOf") && !s.contains("oneOf") &&
      (!s.contains("allOf") || (conditions_only(s["allOf"]) && object_schema(s))))
    return visit_conditional(s, ptr, hint);
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"].get<std::string>();
    auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return it->second;
    std::string name = fresh(ref.rfind('/') != std::string::npos ? ref.substr(ref.rfind('/') + 1) : "ref");
    ref_rules_[ref] = name;  // before visiting: recursion refers back to it
    size_t slot = rules_.size();
    rules_.emplace_back(name, "");
    // Errors inside the target name it by the pointer it was reached by
    // (a pointer fragment), else as this $ref.
    const size_t hash = ref.find('#');
    const bool pointer = hash != std::string::npos && (hash + 1 == ref.size() || ref[hash + 1] == '/');
    std::string body =
        visit(resolve(ref, ptr), pointer ? ref.substr(hash + 1, kMaxNameChars * 4) : ptr + "/$ref", name);
    count_text(body.size());
    rules_[slot].second = body;
    return name;
  }
  if (s.contains("const")) return literal(s["const"]);
  if (s.contains("enum")) {
    const Json& e = s["enum"];
    if (!e.is_array() || e.empty()) unsupported("enum", ptr, "expected a non-empty array");
    std::string out;
    for (auto& v : e) out += (out.empty() ? "" : " | ") + literal(v);
    return "(" + out + ")";
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (s.contains(key)) {
      const Json& alts = s[key];
      if (!alts.is_array() || alts.empty()) unsupported(key, ptr, "expected a non-empty array");
      if (std::string(key) == "oneOf" && !s.contains("anyOf")) {
        if (const auto shapes = one_of_required_shapes(s, ptr)) {
          std::string out;
          for (size_t i = 0; i < shapes->size(); ++i)
            out += (i ? " | " : "") + visit((*shapes)[i], ptr, hint + "_shape" + std::to_string(i));
          return add_rule(hint + "_case", out);
        }
      }
      std::vector<Json> merged;
      for (const Json& alt : alts) merged.push_back(merge_siblings(s, alt, key));
      // A branch no value matches (its types and the parent's do not meet)
      // adds nothing to either union.
      std::vector<Json> kept;
      std::vector<size_t> origin;  // kept branch -> its index in the schema
      for (size_t i = 0; i < merged.size(); ++i)
        if (merged[i] != Json(false)) {
          kept.push_back(std::move(merged[i]));
          origin.push_back(i);
        }
      if (kept.empty()) unsupported(key, ptr, "no branch admits a value of the types beside it: nothing is valid");
      merged = std::move(kept);
      std::vector<std::pair<size_t, Json>> branches;  // (index in the schema, branch)
      if (std::string(key) == "oneOf" && !opt_.one_of_as_any_of) {
        const std::vector<std::pair<size_t, Json>> flat = flatten_one_of(merged, ptr, 0);
        std::vector<Json> flat_branches;
        for (const auto& [at, b] : flat) flat_branches.push_back(b);
        branches = drop_shared_types(flat_branches, ptr);
        for (auto& [at, b] : branches) at = origin[flat[at].first];  // the index in the schema, for pointers and names
        if (auto exclusive = exclusive_closed_objects(branches, ptr))
          branches = std::move(*exclusive);  // exact
        else
          for (size_t i = 0; i < branches.size(); ++i)
            for (size_t j = i + 1; j < branches.size(); ++j)
              if (!provably_disjoint(branches[i].second, branches[j].second, ptr, 0))
                unsupported("oneOf", ptr,
                            "branches " + std::to_string(branches[i].first) + " and " +
                                std::to_string(branches[j].first) +
                                " may both match one document, and oneOf must then reject it (a grammar writes their "
                                "union); expected branches told apart by type, by const/enum values, or by a required "
                                "property with disjoint values (a discriminator)");
      } else {
        for (size_t i = 0; i < merged.size(); ++i) branches.emplace_back(origin[i], std::move(merged[i]));
      }
      std::string out;
      for (size_t i = 0; i < branches.size(); ++i) {
        const size_t index = branches[i].first;
        out +=
            (i ? " | " : "") + visit(branches[i].second, pointer_child(pointer_child(ptr, key), std::to_string(index)),
                                     hint + "_" + std::to_string(index));
      }
      return add_rule(hint + "_case", out);
    }
  }
  if (s.contains("allOf")) {
    // allOf of one schema and nothing else that constrains is that schema:
    // visiting it keeps a $ref a reference, so a recursive type
    // (Foo.children: {allOf: [{$ref: Foo}]}) compiles to a recursive rule
    // instead of being unrolled until the depth limit.
    const Json& parts = s["allOf"];
    bool alone = parts.is_array() && parts.size() == 1;
    for (auto& [k, v] : s.items()) alone = alone && (k == "allOf" || is_annotation(k));
    if (alone) return visit(parts[0], pointer_child(pointer_child(ptr, "allOf"), "0"), hint);
    return visit(merge_all_of(s, ptr), ptr, hint);
  }

  bool nullable = s.contains("nullable") && s["nullable"].is_boolean() && s["nullable"].get<bool>();
  std::vector<std::string> types;
  if (s.contains("type")) {
    const Json& t = s["type"];
    if (t.is_string())
      types.push_back(t.get<std::string>());
    else if (t.is_array())
      for (auto& x : t) types.push_back(x.get<std::string>());
    else
      unsupported("type", ptr, "expected a string or an array of strings");
  } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required") ||
             s.contains("minProperties") || s.contains("maxProperties") || s.contains("patternProperties") ||
             s.contains("propertyNames")) {
    types.push_back("object");
  } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) {
    types.push_back("array");
  } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
    types.push_back("string");
  } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
             s.contains("exclusiveMaximum") || s.contains("multipleOf")) {
    types.push_back("number");
  } else {
    return nullable ? basic("json_value") : basic("json_value");
  }
  if (nullable && std::find(types.begin(), types.end(), "null") == types.end()) types.push_back("null");
  std::vector<std::string> alts;
  for (const std::string& t : types) alts.push_back(visit_type(s, t, ptr, types.size() > 1 ? hint + "_" + t : hint));
  if (alts.size() == 1) return alts[0];
  std::string out;
  for (auto& a : alts) out += (out.empty() ? "" : " | ") + a;
  return "(" + out + ")";
}

// A count keyword (minItems, maxLength, min/maxProperties): a
// non-negative integer (an integral float like 2.0 too, up to 2^53;
// larger unsigned values saturate), or `fallback` when absent. Never a
// cast of an arbitrary double (1e300) to an integer.
int64_t SchemaConverter::count_of(const Json& s, const char* key, const std::string& ptr, int64_t fallback) {
  auto it = s.find(key);
  if (it == s.end()) return fallback;
  const Json& v = *it;
  if (v.is_number_unsigned())
    return static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), std::numeric_limits<int64_t>::max()));
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= 0 && d <= 9007199254740992.0 && d == std::floor(d)) return static_cast<int64_t>(d);
  }
  unsupported(key, ptr, "expected a non-negative integer, found " + v.dump());
}

// anyOf/oneOf branches inherit the parent's other keywords (e.g. a shared
// "type" next to anyOf): each branch is the conjunction of the parent's
// keywords and its own. Keywords the branch lacks are copied; where both
// say something (or the branch is a $ref, whose siblings a visit would not
// read), the two are merged as allOf merges (exact, or refused).
Json SchemaConverter::merge_siblings(const Json& parent, const Json& branch, const char* key) {
  if (!branch.is_object()) return branch;
  Json rest = Json::object();
  for (auto& [k, v] : parent.items())
    if (k != key && !is_annotation(k)) rest[k] = v;
  if (rest.empty()) return branch;
  bool plain_copy = !branch.contains("$ref");
  for (auto& [k, v] : rest.items()) plain_copy = plain_copy && (!branch.contains(k) || branch[k] == v);
  if (plain_copy) {
    Json merged = branch;
    for (auto& [k, v] : rest.items()) merged[k] = v;
    return merged;
  }
  return merge_all_of(Json{{"allOf", Json::array({rest, branch})}}, where_);
}

// allOf: one schema for the conjunction of its parts and the keywords
// beside it, exactly, or refused naming what does not merge. Schema objects
// are conjunctions of their keywords, so keywords found in one part only
// are kept as they are; for a keyword in several parts:
//   required: the union; type: the types all admit (integer inside number);
//   minimum counts (minItems, minLength, minProperties): the largest, maximum
//   counts the smallest; a nested allOf: its parts join this one's;
//   properties and additionalProperties: per key, the conjunction of what
//   each part says of it (its declared schema, else its additionalProperties,
//   else anything), and additionalProperties the conjunction of all;
//   if/then/else and not: each is one condition on the same value, kept
//   apart (an `allOf` of conditions, split case by case when visited);
//   anything else must be equal in every part.
Json SchemaConverter::merge_all_of(const Json& s, const std::string& ptr) {
  const Json& parts = s["allOf"];
  if (!parts.is_array() || parts.empty()) unsupported("allOf", ptr, "expected a non-empty array");
  Json around = s;
  around.erase("allOf");
  struct Part {
    const Json* schema;
    std::string ptr;
  };
  struct Members {  // one part's properties, additionalProperties, patternProperties
    const Json* properties = nullptr;
    const Json* additional = nullptr;
    const Json* patterns = nullptr;
    std::string ptr;
  };
  std::vector<Members> members;
  Json conditions = Json::array();
  Json merged = Json::object();
  // The parts in document order: the schema around, then allOf's, a nested
  // allOf's parts in its place.
  std::vector<Part> order{{&around, ptr}};
  std::vector<Part> pending;  // a stack: the next part is at the back
  for (size_t i = parts.size(); i-- > 0;)
    pending.push_back({&parts[i], pointer_child(pointer_child(ptr, "allOf"), std::to_string(i))});
  while (!pending.empty()) {
    Part part = pending.back();
    pending.pop_back();
    // A $ref chain (or cycle) is followed at most kMaxSchemaDepth hops.
    for (int hops = 0; part.schema->is_object() && part.schema->contains("$ref"); ++hops) {
      if (hops == kMaxSchemaDepth)
        unsupported("$ref", part.ptr,
                    "a chain of more than " + std::to_string(kMaxSchemaDepth) +
                        " $refs (or a cycle of them) inside allOf; the limit is " + std::to_string(kMaxSchemaDepth));
      part.schema = &resolve((*part.schema)["$ref"].get<std::string>(), part.ptr);
    }
    if (*part.schema == Json(true)) continue;
    if (!part.schema->is_object()) unsupported("allOf", part.ptr, "expected object schemas");
    if (order.size() > 4096) unsupported("allOf", ptr, "more than 4096 parts (nested allOf included)");
    order.push_back(part);
    if (part.schema->contains("allOf")) {
      const Json& inner = (*part.schema)["allOf"];
      if (!inner.is_array() || inner.empty()) unsupported("allOf", part.ptr, "expected a non-empty array");
      for (size_t i = inner.size(); i-- > 0;)
        pending.push_back({&inner[i], pointer_child(pointer_child(part.ptr, "allOf"), std::to_string(i))});
    }
  }
  auto count_keyword = [](const std::string& k) {
    return k == "minItems" || k == "minLength" || k == "minProperties" || k == "maxItems" || k == "maxLength" ||
           k == "maxProperties";
  };
  for (const Part& part : order) {
    Members m{.ptr = part.ptr};
    Json condition = Json::object();
    for (auto& [k, v] : part.schema->items()) {
      if (is_annotation(k) || k == "allOf") continue;
      if (k == "properties") {
        if (!v.is_object()) unsupported("properties", part.ptr, "expected an object");
        m.properties = &v;
      } else if (k == "additionalProperties") {
        m.additional = &v;
      } else if (k == "patternProperties") {
        m.patterns = &v;
      } else if (k == "required") {
        if (!v.is_array()) unsupported("required", part.ptr, "expected an array");
        if (!merged.contains("required")) merged["required"] = Json::array();
        for (auto& r : v)
          if (std::find(merged["required"].begin(), merged["required"].end(), r) == merged["required"].end())
            merged["required"].push_back(r);
      } else if (k == "if" || k == "then" || k == "else") {
        condition[k] = v;
      } else if (k == "not") {
        conditions.push_back(Json{{"not", v}});
      } else if (k == "type" && merged.contains("type") && merged["type"] != v) {
        const std::vector<std::string> here = type_list(merged["type"], ptr), there = type_list(v, part.ptr);
        std::vector<std::string> both;
        for (const std::string& t : here)
          for (const std::string& u : there)
            if (t == u || (t == "integer" && u == "number"))
              both.push_back(t);
            else if (t == "number" && u == "integer")
              both.push_back(u);
        if (both.empty()) return Json(false);  // no value has a type all parts admit
        merged["type"] = both.size() == 1 ? Json(both[0]) : Json(both);
      } else if (k == "items" && merged.contains(k) && merged[k] != v && !merged.contains("prefixItems") &&
                 !part.schema->contains("prefixItems") && !v.is_array() && !merged[k].is_array()) {
        merged[k] = both_values(merged[k], v, part.ptr);
      } else if (count_keyword(k) && merged.contains(k) && merged[k] != v) {
        const int64_t here = count_of(merged, k.c_str(), ptr, 0),
                      there = count_of(*part.schema, k.c_str(), part.ptr, 0);
        merged[k] = k.rfind("min", 0) == 0 ? std::max(here, there) : std::min(here, there);
      } else if (k == "pattern" && merged.contains(k) && merged[k] != v && v.is_string() && merged[k].is_string()) {
        // Both patterns find a match: two searches as lookaheads from the start.
        merged[k] =
            "^(?=[\\s\\S]*(?:" + merged[k].get<std::string>() + "))(?=[\\s\\S]*(?:" + v.get<std::string>() + "))";
      } else if (merged.contains(k) && merged[k] != v) {
        unsupported("allOf", part.ptr, "keyword '" + k + "' has conflicting values across branches");
      } else {
        merged[k] = v;
      }
    }
    if (!condition.empty()) conditions.push_back(std::move(condition));
    if (m.properties || m.additional || m.patterns) members.push_back(std::move(m));
  }
  // Members: a key's schema in each part is its declared one, else that
  // part's additionalProperties (patternProperties: the keys they match are
  // not known here, so such a part must declare every key another declares,
  // and no other part may constrain additional keys).
  const Members* with_patterns = nullptr;
  for (const Members& m : members)
    if (m.patterns) {
      if (with_patterns && *with_patterns->patterns != *m.patterns)
        unsupported("allOf", m.ptr, "patternProperties in two branches, differently");
      with_patterns = &m;
    }
  Json properties = Json::object();
  for (const Members& m : members)
    if (m.properties)
      for (auto& [key, v] : m.properties->items())
        if (!properties.contains(key)) properties[key] = Json(true);
  Json additional = Json(true);
  for (const Members& m : members) {
    const Json absent = Json(true);
    const Json& extra = m.additional ? *m.additional : absent;
    if (with_patterns && with_patterns != &m && (m.properties || !only_true(extra))) {
      // A key declared here only: the merged patternProperties reach it as
      // they reach any key they match (visit_object), which is what their
      // part says of it, unless that part's additionalProperties would
      // take it instead (it matches no pattern): then the key is refused
      // where a pattern matches it.
      bool declared_there = true;
      const bool there_additional = with_patterns->additional && !only_true(*with_patterns->additional);
      if (m.properties)
        for (auto& [key, v] : m.properties->items())
          if (there_additional && !(with_patterns->properties && with_patterns->properties->contains(key)))
            for (auto& [pattern, value] : with_patterns->patterns->items()) {
              bool matches = true;  // a pattern the DFA cannot read counts as matching
              try {
                matches = regex_dfa_accepts(regex_search_dfa(pattern, {}), key);
              } catch (const Error&) {
              }
              declared_there = declared_there && !matches;
            }
      if (!declared_there || !only_true(extra))
        unsupported("allOf", m.ptr,
                    "it constrains keys that patternProperties in another branch may match (expected the keys of "
                    "every branch declared beside the patternProperties)");
    }
    for (auto& [key, schema] : properties.items()) {
      const Json& here = m.properties && m.properties->contains(key) ? (*m.properties)[key] : extra;
      schema = both_values(schema, here, m.ptr);
    }
    additional = both_values(additional, extra, m.ptr);
  }
  if (!members.empty()) {
    if (!properties.empty()) merged["properties"] = properties;
    const bool any_additional =
        std::any_of(members.begin(), members.end(), [](const Members& m) { return m.additional; });
    if (any_additional) merged["additionalProperties"] = additional;
    if (with_patterns) merged["patternProperties"] = *with_patterns->patterns;
  }
  // Several `not`s of one kind are one: not P and not Q is not (P or Q),
  // for patterns (P|Q finds a match where one of them does), types and
  // listed values.
  size_t not_count = 0;
  std::string not_kind;
  for (const Json& c : conditions)
    if (c.contains("not")) {
      const Json& n = c["not"];
      std::string kind;
      size_t keys = 0;
      if (n.is_object())
        for (auto& [k, v] : n.items())
          if (!is_annotation(k)) {
            ++keys;
            kind = k;
          }
      if (keys != 1 || !(kind == "pattern" || kind == "type" || kind == "enum" || kind == "const")) kind = "?";
      if (kind == "const") kind = "enum";
      not_kind = not_count++ == 0 || not_kind == kind ? kind : "?";
    }
  if (not_count > 1 && not_kind != "?") {
    Json joined = not_kind == "pattern" ? Json("") : Json::array();
    Json kept = Json::array();
    for (Json& c : conditions) {
      if (!c.contains("not")) {
        kept.push_back(std::move(c));
        continue;
      }
      const Json& n = c["not"];
      if (not_kind == "pattern") {
        joined = joined.get<std::string>() + (joined.get<std::string>().empty() ? "" : "|") +
                 "(?:" + n["pattern"].get<std::string>() + ")";
      } else {
        const Json one = not_kind == "type" ? n["type"] : n.contains("const") ? Json::array({n["const"]}) : n["enum"];
        for (const Json& v : one.is_array() ? one : Json::array({one})) joined.push_back(v);
      }
    }
    kept.push_back(Json{{"not", Json{{not_kind, joined}}}});
    conditions = std::move(kept);
  }
  // Conditions: one if/then/else and one not stay keywords; more are an
  // allOf of conditions (visit_conditional splits them one at a time).
  size_t ifs = 0, nots = 0;
  for (const Json& c : conditions) ++(c.contains("not") ? nots : ifs);
  if (ifs <= 1 && nots <= 1 && !(nots == 1 && ifs == 1)) {
    for (const Json& c : conditions)
      for (auto& [k, v] : c.items()) merged[k] = v;
  } else if (object_schema(merged)) {
    merged["allOf"] = conditions;
  } else {
    unsupported("allOf", ptr,
                "several conditions (if/then/else, not) on a schema that is not an object schema; expected them on "
                "\"type\": \"object\" (split case by case), or `not`s of one kind (patterns, types, values)");
  }
  // An object schema with a required key it forbids admits nothing.
  if (object_schema(merged) && object_impossible(merged)) return Json(false);
  return merged;
}

// A value that must match `a` and `b` (schemas of one property, or of
// additional properties): one schema when intersect_schemas finds one, else
// their allOf (merged, or refused, when it is visited).
Json SchemaConverter::both_values(const Json& a, const Json& b, const std::string& ptr) {
  if (only_true(b) || a == b) return a;
  if (only_true(a)) return b;
  if (a == Json(false) || b == Json(false)) return Json(false);
  if (std::optional<Json> merged = intersect_schemas(a, b, ptr)) return *merged;
  Json parts = Json::array();
  for (const Json* x : {&a, &b}) {
    if (x->is_object() && x->size() == 1 && x->contains("allOf") && (*x)["allOf"].is_array())
      parts.insert(parts.end(), (*x)["allOf"].begin(), (*x)["allOf"].end());
    else
      parts.push_back(*x);
  }
  return Json{{"allOf", parts}};
}

// `true` or a schema of annotations only: any value.
bool SchemaConverter::only_true(const Json& s) {
  if (s.is_boolean()) return s.get<bool>();
  if (!s.is_object()) return false;
  for (auto& [k, v] : s.items())
    if (!is_annotation(k)) return false;
  return true;
}

std::string SchemaConverter::visit_type(const Json& s, const std::string& type, const std::string& ptr,
                                        const std::string& hint) {
  if (type == "null") return basic("json_null");
  if (type == "boolean") return basic("json_boolean");
  if (type == "integer") return visit_integer(s, ptr, hint);
  if (type == "number") return visit_number(s, ptr, hint);
  if (type == "string") return visit_string(s, ptr, hint);
  if (type == "array") return visit_array(s, ptr, hint);
  if (type == "object") return visit_object(s, ptr, hint);
  unsupported("type", ptr, "unknown type '" + type + "'");
}

}  // namespace brioche::grammar::schema

namespace brioche::grammar {

using schema::SchemaConverter;

std::string json_schema_to_ebnf(const nlohmann::ordered_json& schema, const SchemaOptions& options) {
  return SchemaConverter(schema, options).convert();
}

Grammar Grammar::from_json_schema(const nlohmann::ordered_json& schema, const SchemaOptions& options) {
  std::string ebnf = json_schema_to_ebnf(schema, options);
  try {
    return from_ebnf(ebnf, "root");
  } catch (const Error& e) {
    // Values the converter passes through unchecked (e.g. a repetition
    // count of 10^9 from maxItems) are caught by the EBNF parser; the text
    // is shown in part (it may be megabytes).
    fail("JSON schema: its grammar was rejected (", e.what(), "); the grammar starts:\n",
         ebnf.size() <= 2000 ? ebnf : ebnf.substr(0, 2000) + "...");
  }
}

Grammar Grammar::from_json_schema(const std::string& schema_text, const SchemaOptions& options) {
  nlohmann::ordered_json schema;
  try {
    schema = parse_json_bounded<nlohmann::ordered_json>(schema_text, "JSON schema");
  } catch (const nlohmann::json::exception& e) {
    // parse_json_bounded turns parse errors into brioche::Error; a number
    // too large for a double (1e400) is nlohmann's out_of_range instead.
    fail("JSON schema is not valid JSON: ", e.what());
  }
  return from_json_schema(schema, options);
}

}  // namespace brioche::grammar
