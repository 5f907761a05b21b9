// JSON Schema's conditional object keywords, made exact by case splits:
// dependentRequired, dependentSchemas, draft-04..07 `dependencies`, and
// if/then/else whose `if` tests properties against const/enum values and
// `required`. Each is rewritten into a union of plain object schemas that a
// grammar says exactly; what cannot be rewritten exactly is refused with the
// keyword and its pointer.
//
//   dependency of key a:   (a absent)  |  (a present, with what it demands)
//   if I then T else E:    (I holds, and T)  |  (I fails in one way, and E)
//                          I fails when a property it tests is present with
//                          a value outside its const/enum, or a key it
//                          requires is absent (one branch per way; they may
//                          overlap, the union is still exactly "I fails").
// "a absent" is written `properties: {a: false}` (the key is excluded from
// the additional keys too); "a present" is `required: [a]`. The branches
// are disjoint where it matters for exactness only through `oneOf`, which
// does not apply here: a union is exact as long as each branch is.
#include <algorithm>

#include "grammar/schema_converter.h"

namespace brioche::grammar::schema {
namespace {

// At most this many plain schemas per conditional schema: each is a grammar
// of its own (k independent dependencies make 2^k).
constexpr size_t kMaxConditionalBranches = 16;

const char* const kConditionalKeywords[] = {"dependentRequired", "dependentSchemas", "dependencies", "if"};

bool only_annotations(const Json& s, std::initializer_list<const char*> allowed = {}) {
  if (s.is_boolean()) return s.get<bool>();
  if (!s.is_object()) return false;
  for (auto& [key, v] : s.items()) {
    const std::string& k = key;  // clang before 16 cannot capture a structured binding in a lambda
    if (!is_annotation(k) &&
        std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; }) == allowed.end())
      return false;
  }
  return true;
}

bool in_list(const Json& list, const Json& v) { return std::find(list.begin(), list.end(), v) != list.end(); }

void add_required(Json& s, const std::string& key) {
  if (!s.contains("required")) s["required"] = Json::array();
  if (!in_list(s["required"], Json(key))) s["required"].push_back(key);
}

bool is_required(const Json& s, const std::string& key) {
  return s.contains("required") && s["required"].is_array() && in_list(s["required"], Json(key));
}

// The schema a key's value must match when the object has it: its declared
// schema, else additionalProperties (absent = true).
const Json* declared(const Json& s, const std::string& key) {
  if (s.contains("properties") && s["properties"].is_object() && s["properties"].contains(key))
    return &s["properties"][key];
  return nullptr;
}

// Keywords whose meaning depends on other keywords of the same schema
// object: two schemas may be merged into one object only when each group
// comes whole from one side.
const std::vector<std::vector<std::string>> kInteractingKeywords = {
    {"properties", "patternProperties", "additionalProperties", "unevaluatedProperties"},
    {"items", "prefixItems", "additionalItems", "unevaluatedItems", "contains", "minContains", "maxContains"},
    {"if", "then", "else"},
    {"$ref"},
    {"const", "enum"},
};

}  // namespace

// The schema the value of key `key` must match in an object of `s`: its
// declared schema, else additionalProperties (absent: any value), a $ref
// with nothing beside it followed (so its const/enum can be read).
Json SchemaConverter::value_schema_of(const Json& s, const std::string& key, const std::string& ptr) {
  const Json* d = declared(s, key);
  if (!d && s.contains("patternProperties"))
    unsupported("if", ptr, "property '" + key + "' is undeclared and patternProperties may constrain it");
  const Json* v = d ? d : s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
  if (!v) return Json::object();
  for (int hops = 0; v->is_object() && v->contains("$ref") && only_annotations(*v, {"$ref"}) && hops < kMaxSchemaDepth;
       ++hops)
    v = &resolve((*v)["$ref"].get<std::string>(), ptr);
  return v->is_boolean() && v->get<bool>() ? Json::object() : *v;
}

// One schema for a value that must match both `a` and `b`, exactly; nullopt
// when they cannot be said as one (the caller refuses). Schema objects are
// conjunctions of their keywords, so two with no keyword in common merge
// into one (unless a group of keywords that read each other is split);
// listed values are filtered by the other side's plain type or values.
std::optional<Json> SchemaConverter::intersect_schemas(const Json& a_in, const Json& b_in, const std::string& ptr) {
  if (a_in == b_in || only_annotations(b_in)) return a_in;
  if (only_annotations(a_in)) return b_in;
  // A $ref with nothing beside it is its target (read here, not copied
  // into the grammar unless the two merge).
  auto bare_target = [&](const Json& s) -> const Json& {
    const Json* v = &s;
    for (int hops = 0;
         v->is_object() && v->contains("$ref") && only_annotations(*v, {"$ref"}) && hops < kMaxSchemaDepth; ++hops)
      v = &resolve((*v)["$ref"].get<std::string>(), ptr);
    return *v;
  };
  const Json& a = bare_target(a_in);
  const Json& b = bare_target(b_in);
  if (&a != &a_in || &b != &b_in) {
    if (a == b || only_annotations(b)) return a;
    if (only_annotations(a)) return b;
  }
  if (a == Json(false) || b == Json(false)) return Json(false);
  if (!a.is_object() || !b.is_object()) return std::nullopt;
  auto values = [](const Json& s) -> std::optional<Json> {
    if (s.contains("const")) return Json::array({s["const"]});
    if (s.contains("enum") && s["enum"].is_array()) return s["enum"];
    return std::nullopt;
  };
  const std::optional<Json> va = values(a), vb = values(b);
  if (va || vb) {
    const Json& listed = va ? *va : *vb;
    const Json& other = va ? b : a;
    Json kept = Json::array();
    if (va && vb) {
      if (!only_annotations(a, {"const", "enum", "type"}) || !only_annotations(b, {"const", "enum", "type"}))
        return std::nullopt;
      for (const Json& v : listed)
        if (in_list(*vb, v)) kept.push_back(v);
    } else {
      // The other side: a type, and values it excludes (`not {const/enum}`).
      if (!only_annotations(other, {"type", "not"})) return std::nullopt;
      Json excluded = Json::array();
      if (other.contains("not")) {
        const Json& n = other["not"];
        if (!n.is_object() || !only_annotations(n, {"const", "enum"}) || n.contains("const") == n.contains("enum"))
          return std::nullopt;
        excluded = n.contains("const") ? Json::array({n["const"]}) : n["enum"];
        if (!excluded.is_array()) return std::nullopt;
      }
      for (const Json& v : listed)
        if (!in_list(excluded, v) &&
            !(v.is_number() && std::any_of(excluded.begin(), excluded.end(), [&](const Json& w) {
                return w.is_number() && w.get<double>() == v.get<double>();
              })))
          kept.push_back(v);
    }
    for (const Json* side : {&a, &b})  // a type beside the values on either side filters them too
      if (side->contains("type")) {
        const std::vector<std::string> types = type_list((*side)["type"], ptr);
        Json typed = Json::array();
        for (const Json& v : kept)
          if (std::any_of(types.begin(), types.end(), [&](const std::string& t) { return has_type(v, t); }))
            typed.push_back(v);
        kept = typed;
      }
    return kept.empty() ? Json(false) : Json{{"enum", kept}};
  }
  Json merged = a;
  for (auto& [k, v] : b.items()) {
    if (is_annotation(k)) continue;
    if (a.contains(k) && a[k] != v) return std::nullopt;
    merged[k] = v;
  }
  for (const auto& group : kInteractingKeywords) {
    bool in_a = false, in_b = false;
    for (const std::string& k : group) {
      in_a = in_a || (a.contains(k) && !(b.contains(k) && a[k] == b[k]));
      in_b = in_b || (b.contains(k) && !(a.contains(k) && a[k] == b[k]));
    }
    if (in_a && in_b) return std::nullopt;
  }
  return merged;
}

bool SchemaConverter::has_conditional(const Json& s) {
  return s.is_object() && (std::any_of(std::begin(kConditionalKeywords), std::end(kConditionalKeywords),
                                       [&](const char* k) { return s.contains(k); }) ||
                           (s.contains("allOf") && conditions_only(s["allOf"])));
}

// Whether `s` admits objects only: "type": "object", or no type and
// object keywords (what visit() infers), so the branches are read the same way.
bool SchemaConverter::object_schema(const Json& s) {
  if (s.contains("type")) return s["type"] == Json("object") || s["type"] == Json::array({"object"});
  return s.contains("properties") || s.contains("required") || s.contains("additionalProperties") ||
         s.contains("minProperties") || s.contains("maxProperties");
}

// The conditional keyword of `s` that errors name.
std::string SchemaConverter::conditional_keyword(const Json& s) {
  for (const char* k : kConditionalKeywords)
    if (s.contains(k)) return k;
  return "allOf";
}

// An allOf whose parts are all conditions on the value (if/then/else, not):
// each splits the object case by case, one after the other.
bool SchemaConverter::conditions_only(const Json& parts) {
  if (!parts.is_array() || parts.empty()) return false;
  for (const Json& part : parts) {
    if (!part.is_object()) return false;
    bool condition = false;
    for (auto& [k, v] : part.items()) {
      if (k == "if" || k == "not")
        condition = true;
      else if (k != "then" && k != "else" && !is_annotation(k))
        return false;
    }
    if (!condition) return false;
  }
  return true;
}

// Whether an object valid for `s` may have `key` (patternProperties are
// refused beside these keywords before this is asked).
bool SchemaConverter::can_have(const Json& s, const std::string& key) {
  if (const Json* d = declared(s, key)) return *d != Json(false);
  return !(s.contains("additionalProperties") && s["additionalProperties"] == Json(false));
}

// No object can be valid: a required key that may not appear.
bool SchemaConverter::object_impossible(const Json& s) {
  if (!s.contains("required") || !s["required"].is_array()) return false;
  for (const Json& r : s["required"])
    if (r.is_string() && !can_have(s, r.get<std::string>())) return true;
  return false;
}

// `s` (an object schema) and `extra` at once, as one plain schema; nullopt
// when no object satisfies both. Exact or refused: keywords whose
// intersection is not a plain schema (two different schemas for one
// property, additionalProperties in `extra`, ...) are an error naming
// `keyword` at `ptr`.
std::optional<Json> SchemaConverter::merge_object(Json s, const Json& extra, const std::string& keyword,
                                                  const std::string& ptr) {
  if (extra.is_boolean()) return extra.get<bool>() ? std::optional<Json>(s) : std::nullopt;
  if (!extra.is_object())
    unsupported(keyword, ptr, "expected a schema (object or boolean), found " + extra.dump().substr(0, 80));
  auto refuse = [&](const std::string& k, const std::string& why) {
    unsupported(keyword, ptr,
                "its '" + k + "' " + why +
                    " (expected properties, required, min/maxProperties, "
                    "type object, or keywords the schema around it does not use)");
  };
  for (auto& [k, v] : extra.items()) {
    if (is_annotation(k)) continue;
    if (k == "type") {
      const std::vector<std::string> types = type_list(v, ptr);
      if (std::find(types.begin(), types.end(), "object") == types.end()) return std::nullopt;  // an object fails it
    } else if (k == "properties") {
      if (!v.is_object()) refuse(k, "is not an object");
      for (auto& [pk, pv] : v.items()) {
        if (only_annotations(pv)) {
          continue;  // true or {}: any value
        } else if (const Json* d = declared(s, pk)) {
          s["properties"][pk] = both_values(*d, pv, ptr);  // an allOf of both when they do not merge here
        } else if (!can_have(s, pk)) {
          continue;  // the key may not appear at all: nothing to add
        } else if (s.contains("patternProperties")) {
          refuse(k, "constrains property '" + pk + "' that patternProperties may constrain too");
        } else if (s.contains("additionalProperties") && !only_annotations(s["additionalProperties"])) {
          s["properties"][pk] = both_values(s["additionalProperties"], pv, ptr);
        } else {
          if (!s.contains("properties")) s["properties"] = Json::object();
          s["properties"][pk] = pv;
        }
      }
    } else if (k == "required") {
      if (!v.is_array()) refuse(k, "is not an array");
      for (const Json& r : v) add_required(s, r.get<std::string>());
    } else if (k == "minProperties") {
      s[k] = std::max(count_of(s, "minProperties", ptr, 0), count_of(extra, "minProperties", ptr, 0));
    } else if (k == "maxProperties") {
      const int64_t here = count_of(s, "maxProperties", ptr, -1), there = count_of(extra, "maxProperties", ptr, 0);
      s[k] = here < 0 ? there : std::min(here, there);
    } else if (k == "additionalProperties") {
      // Below, once extra's own properties are in.
      if (!only_annotations(v) && (s.contains("patternProperties") || extra.contains("patternProperties")))
        refuse(k, "constrains keys beside patternProperties");
    } else if (k == "anyOf" && !s.contains("anyOf") && !s.contains("oneOf")) {
      s[k] = v;  // each branch merged with the schema when visited
    } else if (k == "if" || k == "then" || k == "else" || k == "not") {
      continue;  // conditions, below
    } else if (k == "dependentRequired" && s.contains(k)) {
      for (auto& [dk, dv] : v.items()) {
        if (!s[k].contains(dk)) s[k][dk] = Json::array();
        for (const Json& r : dv)
          if (!in_list(s[k][dk], r)) s[k][dk].push_back(r);
      }
    } else if (!s.contains(k) && (k == "dependentRequired" || k == "dependentSchemas" || k == "dependencies")) {
      s[k] = v;  // handled when the merged schema is visited
    } else if (!(s.contains(k) && s[k] == v)) {
      refuse(k, "cannot be intersected with the schema around it exactly");
    }
  }
  // additionalProperties of `extra`: every key `extra` does not declare
  // must match it too (declared ones of `s` included).
  if (extra.contains("additionalProperties") && !only_annotations(extra["additionalProperties"])) {
    const Json& more = extra["additionalProperties"];
    if (s.contains("properties"))
      for (auto& [pk, pv] : s["properties"].items())
        if (!(extra.contains("properties") && extra["properties"].contains(pk))) pv = both_values(pv, more, ptr);
    s["additionalProperties"] =
        both_values(s.contains("additionalProperties") ? s["additionalProperties"] : Json(true), more, ptr);
  }
  // Conditions of `extra` join the schema's as an allOf of conditions (split
  // one after the other when the merged schema is visited).
  Json conditions = Json::array();
  Json condition = Json::object();
  for (const char* k : {"if", "then", "else"})
    if (extra.contains(k)) condition[k] = extra[k];
  if (condition.contains("if")) conditions.push_back(condition);
  if (extra.contains("not")) conditions.push_back(Json{{"not", extra["not"]}});
  if (!conditions.empty()) {
    if (s.contains("allOf") && !conditions_only(s["allOf"]))
      refuse("allOf", "cannot be intersected with the schema around it exactly");
    if (!s.contains("allOf")) s["allOf"] = Json::array();
    if (s.contains("not")) {
      s["allOf"].push_back(Json{{"not", s["not"]}});
      s.erase("not");
    }
    for (Json& c : conditions) s["allOf"].push_back(std::move(c));
  }
  if (object_impossible(s)) return std::nullopt;
  return s;
}

// The plain schemas whose union is `s`: conditional keywords split one at
// a time until none is left.
std::vector<Json> SchemaConverter::split_conditionals(const Json& s, const std::string& ptr) {
  std::vector<Json> done, todo{s};
  while (!todo.empty()) {
    Json cur = std::move(todo.back());
    todo.pop_back();
    std::vector<Json> parts = split_one_conditional(cur, ptr);
    if (parts.size() == 1 && !has_conditional(parts[0])) {
      done.push_back(std::move(parts[0]));
    } else {
      for (Json& p : parts) todo.push_back(std::move(p));
    }
    if (done.size() + todo.size() > kMaxConditionalBranches)
      unsupported(conditional_keyword(s), ptr,
                  "the conditions split the schema into more than " + std::to_string(kMaxConditionalBranches) +
                      " object shapes (one per combination of keys present); the limit is " +
                      std::to_string(kMaxConditionalBranches));
  }
  std::reverse(done.begin(), done.end());
  return done;
}

// One split of the first conditional keyword of `s` (already object-only):
// the plain-er schemas whose union is `s`, impossible ones left out.
std::vector<Json> SchemaConverter::split_one_conditional(Json s, const std::string& ptr) {
  std::vector<Json> out;
  auto keep = [&](std::optional<Json> branch) {
    if (branch && !object_impossible(*branch)) out.push_back(std::move(*branch));
  };
  for (const char* map_key : {"dependentRequired", "dependentSchemas", "dependencies"}) {
    if (!s.contains(map_key)) continue;
    const std::string map_ptr = pointer_child(ptr, map_key);
    if (!s[map_key].is_object())
      unsupported(map_key, ptr, "expected an object, found " + s[map_key].dump().substr(0, 80));
    if (s[map_key].empty()) {
      s.erase(map_key);
      return {s};
    }
    const std::string trigger = s[map_key].begin().key();
    const Json demand = s[map_key].begin().value();
    s[map_key].erase(trigger);
    if (s[map_key].empty()) s.erase(map_key);
    const std::string demand_ptr = pointer_child(map_ptr, trigger);
    if (!is_required(s, trigger)) {  // the trigger absent: nothing demanded
      Json absent = s;
      if (!absent.contains("properties")) absent["properties"] = Json::object();
      absent["properties"][trigger] = false;
      keep(absent);
    }
    if (can_have(s, trigger)) {
      Json present = s;
      add_required(present, trigger);
      if (demand.is_array()) {  // dependentRequired, or dependencies' array form
        for (const Json& r : demand) {
          if (!r.is_string())
            unsupported(map_key, demand_ptr, "expected an array of key names, found " + demand.dump().substr(0, 80));
          add_required(present, r.get<std::string>());
        }
        keep(present);
      } else if (std::string(map_key) == "dependentRequired") {
        unsupported(map_key, demand_ptr, "expected an array of key names, found " + demand.dump().substr(0, 80));
      } else {
        keep(merge_object(present, demand, map_key, demand_ptr));
      }
    }
    return out;
  }
  if (!s.contains("if") && s.contains("allOf") && conditions_only(s["allOf"])) {
    // The next condition of an allOf of conditions: `not X` is "if X then
    // nothing"; then/else without an if constrain nothing.
    Json part = s["allOf"][0];
    s["allOf"].erase(0);
    if (s["allOf"].empty()) s.erase("allOf");
    if (part.contains("not")) {
      const Json& n = part["not"];
      Json nots = Json::array();  // not {anyOf: [X, Y]}: not X, not Y
      if (n.is_object() && n.contains("anyOf") && only_annotations(n, {"anyOf"}) && n["anyOf"].is_array())
        for (const Json& x : n["anyOf"]) nots.push_back(Json{{"not", x}});
      if (part.contains("if") || !nots.empty()) {  // each not becomes a part of its own
        if (!s.contains("allOf")) s["allOf"] = Json::array();
        if (nots.empty()) nots.push_back(Json{{"not", n}});
        for (Json& x : nots) s["allOf"].push_back(std::move(x));
        part.erase("not");
      } else {
        part = Json{{"if", n}, {"then", false}};
      }
    }
    for (const char* k : {"if", "then", "else"})
      if (part.contains(k)) s[k] = part[k];
    if (!s.contains("if")) {
      s.erase("then");
      s.erase("else");
    }
    return {s};
  }
  if (!s.contains("if")) return {s};
  Json cond = s["if"];
  // if {not: X} then T else E is if X then E else T.
  while (cond.is_object() && cond.contains("not") && only_annotations(cond, {"not"})) {
    const Json swapped_then = s.contains("else") ? s["else"] : Json(true);
    const Json swapped_else = s.contains("then") ? s["then"] : Json(true);
    s["then"] = swapped_then;
    s["else"] = swapped_else;
    cond = Json(cond["not"]);
  }
  const std::optional<Json> then_s = s.contains("then") ? std::optional<Json>(s["then"]) : std::nullopt;
  const std::optional<Json> else_s = s.contains("else") ? std::optional<Json>(s["else"]) : std::nullopt;
  s.erase("if");
  s.erase("then");
  s.erase("else");
  const std::string if_ptr = pointer_child(ptr, "if");
  auto with = [&](const Json& base, const std::optional<Json>& branch, const char* which) -> std::optional<Json> {
    if (object_impossible(base)) return std::nullopt;
    if (!branch) return base;
    return merge_object(base, *branch, which, pointer_child(ptr, which));
  };
  if (cond.is_boolean()) {
    keep(with(s, cond.get<bool>() ? then_s : else_s, cond.get<bool>() ? "then" : "else"));
    return out;
  }
  auto refuse = [&](const std::string& why) {
    unsupported("if", ptr,
                why +
                    "; expected an `if` of properties with const/enum values and required keys "
                    "(like {\"properties\": {\"kind\": {\"const\": \"a\"}}, \"required\": [\"kind\"]})");
  };
  if (cond.contains("type")) {
    const std::vector<std::string> types = type_list(cond["type"], if_ptr);
    if (std::find(types.begin(), types.end(), "object") == types.end()) {  // never holds on an object
      keep(with(s, else_s, "else"));
      return out;
    }
  }
  if (!only_annotations(cond, {"properties", "required", "type"}))
    refuse("its keywords are not all properties/required/type");
  // The values each tested property must have for `if` to hold; and
  // properties tested as objects whose own properties have const/enum values
  // (GitHub's actions: runs: {properties: {using: {const: composite}}}).
  std::vector<std::pair<std::string, Json>> tests, nested;
  if (cond.contains("properties")) {
    if (!cond["properties"].is_object()) refuse("its properties is not an object");
    for (auto& [p, ps] : cond["properties"].items()) {
      if (only_annotations(ps)) continue;  // true or {}: always holds
      if (nested_object_test(ps)) {
        nested.emplace_back(p, ps);
        continue;
      }
      if (!ps.is_object() || !only_annotations(ps, {"const", "enum", "type"}) ||
          (ps.contains("const") == ps.contains("enum")))
        refuse("property '" + p +
               "' is tested by something other than one const or enum (or an object whose properties are tested "
               "so)");
      Json values = ps.contains("const") ? Json::array({ps["const"]}) : ps["enum"];
      if (!values.is_array()) refuse("property '" + p + "' has an enum that is not an array");
      if (ps.contains("type")) {  // values of another type can never match
        const std::vector<std::string> types = type_list(ps["type"], if_ptr);
        Json typed = Json::array();
        for (const Json& v : values)
          if (std::any_of(types.begin(), types.end(), [&](const std::string& t) { return has_type(v, t); }))
            typed.push_back(v);
        values = typed;
      }
      tests.emplace_back(p, values);
    }
  }
  std::vector<std::string> cond_required;
  if (cond.contains("required"))
    for (const Json& r : cond["required"]) cond_required.push_back(r.get<std::string>());

  // `if` holds: every tested property absent or one of its values, every
  // key it requires present.
  std::optional<Json> holds = s;
  for (const auto& [p, values] : tests) {
    if (!holds) break;
    if (!can_have(*holds, p)) continue;
    const std::optional<Json> narrowed = intersect_schemas(
        value_schema_of(*holds, p, if_ptr), values.empty() ? Json(false) : Json{{"enum", values}}, if_ptr);
    if (!narrowed)
      refuse("property '" + p + "' has a schema beside the one `if` tests (expected a type, const or enum)");
    if (!holds->contains("properties")) (*holds)["properties"] = Json::object();
    (*holds)["properties"][p] = *narrowed;
  }
  for (const auto& [p, test] : nested) {
    if (!holds) break;
    if (!can_have(*holds, p)) continue;
    if (!holds->contains("properties")) (*holds)["properties"] = Json::object();
    (*holds)["properties"][p] = both_values(value_schema_of(*holds, p, if_ptr), test, if_ptr);
  }
  if (holds)
    for (const std::string& r : cond_required) add_required(*holds, r);
  keep(holds ? with(*holds, then_s, "then") : std::nullopt);

  // `if` fails: a key it requires is absent, or a tested property is
  // present with another value.
  for (const std::string& r : cond_required) {
    if (is_required(s, r)) continue;
    Json absent = s;
    if (!absent.contains("properties")) absent["properties"] = Json::object();
    absent["properties"][r] = false;
    keep(with(absent, else_s, "else"));
  }
  for (const auto& [p, values] : tests) {
    if (!can_have(s, p)) continue;
    Json other = s;
    add_required(other, p);
    Json value_schema = value_schema_of(s, p, if_ptr);
    if (only_annotations(value_schema, {"type"}) && value_schema.contains("type")) {
      // Types of finitely many values (boolean, null) are their values.
      const std::vector<std::string> types = type_list(value_schema["type"], ptr);
      if (std::all_of(types.begin(), types.end(), [](const std::string& t) { return t == "boolean" || t == "null"; })) {
        Json all = Json::array();
        for (const std::string& t : types) {
          if (t == "boolean")
            all.insert(all.end(), {Json(false), Json(true)});
          else
            all.push_back(nullptr);
        }
        value_schema = Json{{"enum", all}};
      }
    }
    if (value_schema.contains("const") || value_schema.contains("enum")) {
      Json kept = Json::array();
      for (const Json& v : value_schema.contains("const") ? Json::array({value_schema["const"]}) : value_schema["enum"])
        if (!in_list(values, v)) kept.push_back(v);
      if (kept.empty()) continue;
      value_schema.erase("const");
      value_schema["enum"] = kept;
    } else if (!values.empty()) {
      if (value_schema.contains("not")) refuse("property '" + p + "' already has a `not`");
      value_schema["not"] = Json{{"enum", values}};  // visit_not says it exactly or refuses
    }
    if (!other.contains("properties")) other["properties"] = Json::object();
    other["properties"][p] = value_schema;
    keep(with(other, else_s, "else"));
  }
  // A property tested as an object fails the test when it is present and
  // of another type (the test says object), or an object whose tested
  // property is present with another value: one branch per way.
  for (const auto& [p, test] : nested) {
    if (!can_have(s, p)) continue;
    const Json declared_schema = value_schema_of(s, p, if_ptr);
    std::vector<Json> ways;
    if (test.contains("type") && (possible_types(declared_schema, if_ptr, 0) & ~4u) != 0)
      ways.push_back(Json{{"type", Json::array({"null", "boolean", "string", "number", "array"})}});
    for (auto& [q, qs] : test["properties"].items()) {
      if (only_annotations(qs)) continue;
      const Json values = qs.contains("const") ? Json::array({qs["const"]}) : qs["enum"];
      Json other_value = Json{{"not", Json{{"enum", values}}}};
      if (qs.contains("type")) {
        Json typed = Json::array();  // a value of another type fails the test too
        for (const Json& v : values)
          for (const std::string& t : type_list(qs["type"], if_ptr))
            if (has_type(v, t) && !in_list(typed, v)) typed.push_back(v);
        other_value = Json{{"not", Json{{"enum", typed}}}};
      }
      ways.push_back(Json{{"type", "object"}, {"required", Json::array({q})}, {"properties", Json{{q, other_value}}}});
    }
    for (const Json& way : ways) {
      Json other = s;
      add_required(other, p);
      if (!other.contains("properties")) other["properties"] = Json::object();
      other["properties"][p] = both_values(declared_schema, way, if_ptr);
      keep(with(other, else_s, "else"));
    }
  }
  return out;
}

// `{"type": "object", "properties": {q: {"const": ...}}}`: an object test
// of const/enum values (type object optional; without it, values of other
// types pass the test).
bool SchemaConverter::nested_object_test(const Json& t) {
  if (!t.is_object() || !only_annotations(t, {"type", "properties"}) || !t.contains("properties") ||
      !t["properties"].is_object() || t["properties"].empty())
    return false;
  if (t.contains("type") && t["type"] != Json("object")) return false;
  for (auto& [q, qs] : t["properties"].items()) {
    if (only_annotations(qs)) continue;
    if (!qs.is_object() || !only_annotations(qs, {"const", "enum", "type"}) ||
        qs.contains("const") == qs.contains("enum"))
      return false;
    if (qs.contains("enum") && !qs["enum"].is_array()) return false;
  }
  return true;
}

// The conditional keywords of an object-only schema: the union of the plain
// schemas they split into.
// if {contains: C} then T else E on an array schema whose items are I, with
// T bounding the array to one item (readthedocs' install list: an item with
// method "uv" must be alone): either no item matches C (items I and not C,
// with E), or some item does, which with at most one item is [x], x in I
// and C. The two are disjoint and their union is the schema. C is an object
// test (type object, required keys, properties with const/enum values) whose
// failures are a union of object shapes (nested_object_test's ways).
std::string SchemaConverter::visit_array_conditional(const Json& s, const std::string& ptr, const std::string& hint) {
  auto refuse = [&](const std::string& why) {
    unsupported("if", ptr,
                why +
                    "; expected on an array: if {contains: an object test} then {maxItems: 1 (minItems)} "
                    "(else {minItems/maxItems})");
  };
  const Json& cond = s["if"];
  if (!cond.is_object() || !only_annotations(cond, {"contains"})) refuse("its keywords are not contains alone");
  const Json& c = cond["contains"];
  if (!c.is_object() || !only_annotations(c, {"type", "properties", "required"}) ||
      (c.contains("type") && c["type"] != Json("object")) || (c.contains("required") && !c["required"].is_array()))
    refuse("contains is not an object test");
  const Json test_properties = c.contains("properties") ? c["properties"] : Json::object();
  if (!nested_object_test(Json{{"properties", test_properties.empty() ? Json{{"_", true}} : test_properties}}))
    refuse("contains tests a property by something other than const or enum");
  const Json then_s = s.contains("then") ? s["then"] : Json(true);
  const Json else_s = s.contains("else") ? s["else"] : Json(true);
  for (const Json* branch : {&then_s, &else_s})
    if (!(branch->is_boolean() && branch->get<bool>()) &&
        (!branch->is_object() || !only_annotations(*branch, {"minItems", "maxItems"})))
      refuse("then/else say more than minItems/maxItems");
  if (count_of(then_s.is_object() ? then_s : Json::object(), "maxItems", ptr, 2) > 1)
    refuse("then does not bound the array to one item (maxItems: 1)");
  for (const char* k : {"prefixItems", "contains", "uniqueItems", "dependentRequired", "dependentSchemas",
                        "dependencies", "allOf", "anyOf", "oneOf", "not"})
    if (s.contains(k)) refuse(std::string("beside '") + k + "'");
  Json base = s;
  for (const char* k : {"if", "then", "else"}) base.erase(k);
  const Json items = base.contains("items") ? base["items"] : Json(true);
  if (items.is_array()) refuse("items is a list (a tuple)");
  auto bounded = [&](Json b, const Json& extra) {
    if (extra.is_object())
      for (const char* k : {"minItems", "maxItems"})
        if (extra.contains(k)) {
          const int64_t here = count_of(b, k, ptr, std::string(k) == "minItems" ? 0 : -1),
                        there = count_of(extra, k, ptr, 0);
          b[k] = std::string(k) == "minItems" ? std::max(here, there) : here < 0 ? there : std::min(here, there);
        }
    return b;
  };
  // The ways an item fails C (each an object shape, or the other types).
  Json fails = Json::array();
  if (c.contains("type"))
    fails.push_back(Json{{"type", Json::array({"null", "boolean", "string", "number", "array"})}});
  if (c.contains("required"))
    for (const Json& r : c["required"])
      fails.push_back(Json{{"type", "object"}, {"properties", Json{{r.get<std::string>(), false}}}});
  for (auto& [q, qs] : test_properties.items()) {
    if (only_annotations(qs)) continue;
    const Json values = qs.contains("const") ? Json::array({qs["const"]}) : qs["enum"];
    fails.push_back(Json{{"type", "object"},
                         {"required", Json::array({q})},
                         {"properties", Json{{q, Json{{"not", Json{{"enum", values}}}}}}}});
  }
  const unsigned item_types = possible_types(items, ptr, 0);
  Json kept = Json::array();
  for (const Json& way : fails)
    if (possible_types(way, ptr, 0) & item_types) kept.push_back(both_values(items, way, ptr));
  std::vector<std::string> alts;
  Json none = bounded(base, else_s);  // no item matches C
  if (kept.empty()) {
    none["maxItems"] = 0;
  } else {
    none["items"] = kept.size() == 1 ? kept[0] : Json{{"anyOf", kept}};
  }
  alts.push_back(visit(none, ptr, hint + "_none"));
  Json one = bounded(base, then_s);  // one item, and it matches C
  one["minItems"] = std::max<int64_t>(1, count_of(one, "minItems", ptr, 0));
  one["maxItems"] = 1;
  one["items"] = both_values(items, c, ptr);
  if (count_of(one, "minItems", ptr, 0) <= 1 && count_of(one, "maxItems", ptr, 1) >= 1)
    alts.push_back(visit(one, ptr, hint + "_one"));
  std::string out;
  for (const std::string& a : alts) out += (out.empty() ? "" : " | ") + a;
  return add_rule(hint + "_cond", out);
}

std::string SchemaConverter::visit_conditional(const Json& s, const std::string& ptr, const std::string& hint) {
  if (s.contains("if") && s.contains("type") && s["type"] == Json("array"))
    return visit_array_conditional(s, ptr, hint);
  for (const char* k : {"$ref", "const", "enum", "patternProperties", "propertyNames"})
    if (s.contains(k))
      unsupported(conditional_keyword(s), ptr,
                  std::string("beside '") + k + "': expected it beside properties/required/additionalProperties only");
  if (s.contains("type") && s["type"].is_array() && s["type"].size() > 1 &&
      std::find(s["type"].begin(), s["type"].end(), Json("object")) != s["type"].end())
    return visit_conditional_by_type(s, ptr, hint);
  if (!object_schema(s))
    unsupported(conditional_keyword(s), ptr,
                "expected it on an object schema (\"type\": \"object\" alone): the conditions apply to objects only");
  // Strict mode closes an object that declares properties; the branches
  // declare more (forbidden or required keys) than `s` did, so its
  // openness is written down before splitting.
  Json open_s = s;
  if (opt_.strict && !s.contains("additionalProperties"))
    open_s["additionalProperties"] =
        !((s.contains("properties") && !s["properties"].empty()) || (s.contains("required") && !s["required"].empty()));
  std::vector<Json> parts = split_conditionals(open_s, ptr);
  if (parts.empty())
    unsupported(conditional_keyword(s), ptr, "no object satisfies the conditions: the schema matches nothing");
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!parts[i].contains("type")) parts[i]["type"] = "object";
    out += (i ? " | " : "") + visit(parts[i], ptr, hint + "_c" + std::to_string(i));
  }
  return parts.size() == 1 ? out : add_rule(hint + "_cond", out);
}

}  // namespace brioche::grammar::schema
