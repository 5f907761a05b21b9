// Conditions (if/then/else, dependencies) on a schema whose type list has
// object and other types, like GitLab's `"type": ["object", "null"]` beside
// `if {required: [access]}`: the object case splits as conditions do
// (visit_conditional); every other type gets its own branch, where the
// conditions are decided once for all its values. On a value that is not
// an object the object keywords (required, properties, ...) hold, so an
// `if {required: [k]}` holds on null and its `then` must too; an `if` whose
// type excludes the value's fails, so `else` applies.

#include <algorithm>

#include "grammar/schema_converter.h"

namespace brioche::grammar::schema {
namespace {

bool one_of_keys(const std::string& k, std::initializer_list<const char*> keys) {
  return std::any_of(keys.begin(), keys.end(), [&](const char* x) { return k == x; });
}

bool object_keyword(const std::string& k) {
  return one_of_keys(
      k, {"properties", "required", "additionalProperties", "propertyNames", "minProperties", "maxProperties",
          "patternProperties", "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties"});
}

// Keywords that constrain only values of their type.
bool vacuous_on(const std::string& k, const std::string& t) {
  if (object_keyword(k)) return true;
  if (one_of_keys(k, {"pattern", "minLength", "maxLength", "format"})) return t != "string";
  if (one_of_keys(k, {"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains", "additionalItems",
                      "minContains", "maxContains", "unevaluatedItems"}))
    return t != "array";
  if (one_of_keys(k, {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}))
    return t != "number" && t != "integer";
  return false;
}

}  // namespace

std::optional<bool> SchemaConverter::holds_on_type(const Json& x_in, const std::string& t, const std::string& ptr) {
  const Json& x = follow_refs(x_in, ptr);
  if (x.is_boolean()) return x.get<bool>();
  if (!x.is_object()) return std::nullopt;
  bool all = true;
  for (auto& [k, v] : x.items()) {
    std::optional<bool> h;
    if (is_annotation(k) || vacuous_on(k, t)) {
      h = true;
    } else if (k == "type") {
      const std::vector<std::string> types = type_list(v, ptr);
      auto has = [&](const char* name) { return std::find(types.begin(), types.end(), name) != types.end(); };
      if (has(t.c_str()) || (t == "integer" && has("number")))
        h = true;
      else if (t == "number" && has("integer"))
        h = std::nullopt;  // integer-valued numbers only
      else
        h = false;
    } else if ((k == "const" || k == "enum") && t == "null") {
      const Json values = k == "const" ? Json::array({v}) : v;
      h = std::find(values.begin(), values.end(), Json(nullptr)) != values.end();
    } else if (k == "not") {
      const std::optional<bool> n = holds_on_type(v, t, ptr);
      if (n) h = !*n;
    } else if ((k == "allOf" || k == "anyOf") && v.is_array()) {
      bool known = true, any = false, every = true;
      for (const Json& part : v) {
        const std::optional<bool> p = holds_on_type(part, t, ptr);
        known = known && p.has_value();
        any = any || p.value_or(false);
        every = every && p.value_or(true);
      }
      if (k == "allOf" && (!every || known)) h = every;
      if (k == "anyOf" && (any || known)) h = any;
    }
    if (!h) return std::nullopt;
    all = all && *h;
  }
  return all;
}

std::string SchemaConverter::visit_conditional_by_type(const Json& s, const std::string& ptr, const std::string& hint) {
  std::vector<std::string> alts;
  for (const std::string& t : type_list(s["type"], ptr)) {
    Json branch = s;
    branch["type"] = t;
    if (t == "object") {
      alts.push_back(visit(branch, ptr, hint + "_object"));
      continue;
    }
    // The conditions, decided for every value of type t.
    bool holds = true;
    if (s.contains("if")) {
      auto decide = [&](const Json& x, const char* which) {
        const std::optional<bool> h = holds_on_type(x, t, pointer_child(ptr, which));
        if (!h)
          unsupported("if", ptr,
                      std::string("its '") + which + "' depends on the value of type " + t +
                          " (expected object tests, types and values of other types only)");
        return *h;
      };
      const bool taken = decide(s["if"], "if");
      const char* branch_key = taken ? "then" : "else";
      if (s.contains(branch_key)) holds = decide(s[branch_key], branch_key);
    }
    if (!holds) continue;
    for (const char* k : {"if", "then", "else"}) branch.erase(k);
    for (auto it = branch.begin(); it != branch.end();)
      it = object_keyword(it.key()) ? branch.erase(it) : std::next(it);
    alts.push_back(visit(branch, ptr, hint + "_" + t));
  }
  if (alts.empty())
    unsupported(conditional_keyword(s), ptr, "no value satisfies the conditions: the schema matches nothing");
  std::string out;
  for (const std::string& a : alts) out += (out.empty() ? "" : " | ") + a;
  return add_rule(hint + "_types", out);
}

}  // namespace brioche::grammar::schema
