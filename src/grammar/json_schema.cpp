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

const Json& SchemaConverter::resolve(const std::string& ref, const std::string& ptr) {
  if (ref.empty() || ref[0] != '#')
    unsupported("$ref", ptr, "only local references (#/...) are supported, got '" + ref + "'");
  const Json* cur = &root_;
  size_t pos = 1;
  while (pos < ref.size()) {
    if (ref[pos] != '/') unsupported("$ref", ptr, "malformed JSON pointer '" + ref + "'");
    size_t next = ref.find('/', pos + 1);
    std::string tok = ref.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
    std::string key;
    for (size_t i = 0; i < tok.size(); ++i) {
      if (tok[i] == '~' && i + 1 < tok.size()) {
        key += tok[i + 1] == '1' ? '/' : '~';
        ++i;
      } else {
        key += tok[i];
      }
    }
    if (cur->is_object() && cur->contains(key)) {
      cur = &(*cur)[key];
    } else if (cur->is_array() && !key.empty() && key.size() <= 9 && std::all_of(key.begin(), key.end(), ::isdigit) &&
               std::stoul(key) < cur->size()) {
      cur = &(*cur)[std::stoul(key)];
    } else {
      unsupported("$ref", ptr, "reference '" + ref + "' does not resolve");
    }
    pos = next == std::string::npos ? ref.size() : next;
  }
  return *cur;
}

std::string SchemaConverter::visit(const Json& s, const std::string& ptr, const std::string& hint_in) {
  VisitScope scope(*this, ptr);
  const std::string hint = hint_in.size() <= kMaxNameChars ? hint_in : hint_in.substr(0, kMaxNameChars);
  if (s.is_boolean()) {
    if (s.get<bool>()) return basic("json_value");
    unsupported("false", ptr, "the schema 'false' matches nothing");
  }
  if (!s.is_object()) unsupported("schema", ptr, "expected an object or boolean, found " + s.dump());
  for (auto& [k, v] : s.items())
    if (kConstrainingUnsupported.count(k) && k != "uniqueItems")
      unsupported(k, ptr,
                  "a context-free grammar cannot enforce it here; expected only the keywords listed in "
                  "docs/grammar.md (remove it or rewrite the schema without it)");
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
  if (has_conditional(s) && !s.contains("anyOf") && !s.contains("oneOf") && !s.contains("allOf"))
    return visit_conditional(s, ptr, hint);
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"].get<std::string>();
    auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return it->second;
    std::string name = fresh(ref.rfind('/') != std::string::npos ? ref.substr(ref.rfind('/') + 1) : "ref");
    ref_rules_[ref] = name;  // before visiting: recursion refers back to it
    size_t slot = rules_.size();
    rules_.emplace_back(name, "");
    std::string body = visit(resolve(ref, ptr), ref.substr(1, kMaxNameChars * 4), name);
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
      std::vector<std::pair<size_t, Json>> branches;  // (index in the schema, branch)
      if (std::string(key) == "oneOf" && !opt_.one_of_as_any_of) {
        branches = drop_shared_types(merged, ptr);
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
        for (size_t i = 0; i < merged.size(); ++i) branches.emplace_back(i, std::move(merged[i]));
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
// "type" next to anyOf); only keys absent from the branch are copied.
Json SchemaConverter::merge_siblings(const Json& parent, const Json& branch, const char* key) {
  if (!branch.is_object()) return branch;
  Json merged = branch;
  for (auto& [k, v] : parent.items())
    if (k != key && !is_annotation(k) && !merged.contains(k)) merged[k] = v;
  return merged;
}

// allOf of object-like schemas: properties and required are unioned, other
// keywords must agree. Anything else is reported instead of being guessed.
Json SchemaConverter::merge_all_of(const Json& s, const std::string& ptr) {
  const Json& parts = s["allOf"];
  if (!parts.is_array() || parts.empty()) unsupported("allOf", ptr, "expected a non-empty array");
  Json merged = Json::object();
  for (auto& [k, v] : s.items())
    if (k != "allOf") merged[k] = v;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Json* part = &parts[i];
    std::string part_ptr = pointer_child(pointer_child(ptr, "allOf"), std::to_string(i));
    // A $ref chain (or cycle) is followed at most kMaxSchemaDepth hops.
    for (int hops = 0; part->is_object() && part->contains("$ref"); ++hops) {
      if (hops == kMaxSchemaDepth)
        unsupported("$ref", part_ptr,
                    "a chain of more than " + std::to_string(kMaxSchemaDepth) +
                        " $refs (or a cycle of them) inside allOf; the limit is " + std::to_string(kMaxSchemaDepth));
      part = &resolve((*part)["$ref"].get<std::string>(), part_ptr);
    }
    if (!part->is_object()) unsupported("allOf", part_ptr, "expected object schemas");
    for (auto& [k, v] : part->items()) {
      if (is_annotation(k)) continue;
      if (k == "properties") {
        if (!merged.contains("properties")) merged["properties"] = Json::object();
        for (auto& [pk, pv] : v.items()) {
          if (merged["properties"].contains(pk) && merged["properties"][pk] != pv)
            unsupported("allOf", part_ptr, "property '" + pk + "' is defined differently in two branches");
          merged["properties"][pk] = pv;
        }
      } else if (k == "required") {
        if (!merged.contains("required")) merged["required"] = Json::array();
        for (auto& r : v)
          if (std::find(merged["required"].begin(), merged["required"].end(), r) == merged["required"].end())
            merged["required"].push_back(r);
      } else if (k == "allOf") {
        unsupported("allOf", part_ptr, "nested allOf");
      } else if (merged.contains(k) && merged[k] != v) {
        unsupported("allOf", part_ptr, "keyword '" + k + "' has conflicting values across branches");
      } else {
        merged[k] = v;
      }
    }
  }
  return merged;
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
