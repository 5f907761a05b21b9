// JSON Schema objects: properties, required, additionalProperties,
// min/maxProperties, patternProperties, propertyNames.

#include <algorithm>
#include <bit>
#include <cctype>
#include <map>

#include "grammar/schema_converter.h"

namespace brioche::grammar::schema {
namespace {

// patternProperties with more patterns are refused: keys are told apart by
// the set of patterns they match, one kind of key per set (2^n).
constexpr size_t kMaxKeyPatterns = 4;

// true, or an object of annotations only: any value.
bool any_value(const Json& s) {
  if (s.is_boolean()) return s.get<bool>();
  if (!s.is_object()) return false;
  for (auto& [k, v] : s.items())
    if (!is_annotation(k)) return false;
  return true;
}

}  // namespace

std::string SchemaConverter::visit_object(const Json& s, const std::string& ptr, const std::string& hint) {
  std::vector<std::pair<std::string, std::string>> props;  // raw key text, value expr
  std::set<std::string> required;
  std::vector<std::string> required_order;  // undeclared required keys come in this order
  if (s.contains("required")) {
    for (auto& r : s["required"])
      if (required.insert(r.get<std::string>()).second) required_order.push_back(r.get<std::string>());
  }
  // patternProperties apply to every key their pattern finds a match in,
  // declared ones too: a declared key's value must match its own schema and
  // every such pattern's.
  const std::vector<KeyPattern> patterns = key_patterns(s, ptr);
  auto with_patterns = [&](Json value, const std::string& key) {
    for (const KeyPattern& kp : patterns) {
      if (!regex_dfa_accepts(kp.keys, key)) continue;
      if (!key.empty() && key.back() == '\n' && kp.pattern.find('$') != std::string::npos)
        unsupported("patternProperties", kp.ptr,
                    "declared key '" + key +
                        "' ends in a newline, where Python's $ (what validators run) and "
                        "ECMA-262's differ");
      value = both_schemas(value, kp.schema, "patternProperties", kp.ptr,
                           "declared key '" + key + "' must match its schema and the pattern's");
    }
    return value;
  };
  // propertyNames beside declared keys: they must satisfy it too.
  std::optional<KeyNames> names;
  if (s.contains("propertyNames") && patterns.empty() &&
      ((s.contains("properties") && s["properties"].is_object() && !s["properties"].empty()) || !required.empty()))
    names = key_names(s, ptr);
  std::vector<std::string> forbidden;  // `properties: {k: false}`: k may not appear (nor as an additional key)
  if (s.contains("properties")) {
    for (auto& [k, v] : s["properties"].items()) {
      const bool named = !names || key_name_admitted(*names, k, ptr);
      const Json value = v == Json(false) || !named ? Json(false) : with_patterns(v, k);
      if (value == Json(false)) {
        if (required.count(k))
          unsupported("required", ptr, "'" + k + "' is required and its schema is false: the schema matches nothing");
        forbidden.push_back(k);
        continue;
      }
      props.emplace_back(k, visit(value, pointer_child(pointer_child(ptr, "properties"), k), hint + "_" + k));
    }
  }
  // Keys that may appear (forbidden ones do not count: they close nothing).
  const bool has_props = !props.empty();
  // A required key that is not declared: its value is what
  // additionalProperties allows (any value when it says nothing).
  std::string undeclared_value;
  for (const std::string& r : required_order) {
    bool found = false;
    for (auto& p : props) found |= p.first == r;
    if (found) continue;
    if (names && !key_name_admitted(*names, r, ptr))
      unsupported("required", ptr, "'" + r + "' is required and propertyNames refuses it: the schema matches nothing");
    if (std::any_of(patterns.begin(), patterns.end(),
                    [&](const KeyPattern& kp) { return regex_dfa_accepts(kp.keys, r); })) {
      const Json value = with_patterns(Json(true), r);
      if (value == Json(false))
        unsupported("required", ptr, "'" + r + "' is required and no value matches its patterns' schemas");
      props.emplace_back(r, visit(value, pointer_child(ptr, "patternProperties"), hint + "_" + r));
      continue;
    }
    if (undeclared_value.empty()) {
      const Json a = s.contains("additionalProperties") ? s["additionalProperties"] : Json(true);
      if (a == Json(false))
        unsupported("required", ptr,
                    "'" + r +
                        "' is required but not declared, and additionalProperties is false: "
                        "the schema matches nothing");
      undeclared_value =
          a.is_object() ? visit(a, pointer_child(ptr, "additionalProperties"), hint + "_addl") : basic("json_value");
    }
    props.emplace_back(r, undeclared_value);
  }
  int64_t min_props = 0, max_props = -1;
  min_props = count_of(s, "minProperties", ptr, 0);
  max_props = count_of(s, "maxProperties", ptr, -1);
  if (max_props >= 0 && max_props < min_props) unsupported("minProperties", ptr, "minProperties exceeds maxProperties");
  const bool counted = min_props > 0 || max_props >= 0;
  // The grammar counts declared members with one rule per (member, count
  // so far); counts past the declared members are a repetition of the
  // additional ones, counted without rules (a CounterEdge), so any bound
  // works there. Refused: more (member, count) pairs than 64 x 64.
  {
    const int64_t declared = static_cast<int64_t>(props.size());
    const int64_t counts = std::min(std::max(min_props, max_props), declared + 1);
    if (counted && declared * counts > 64 * 64)
      unsupported(min_props > max_props ? "minProperties" : "maxProperties", ptr,
                  "expected at most 4096 (declared property, count) pairs (the grammar has one rule per pair), found " +
                      std::to_string(declared) + " declared properties and a bound of " +
                      std::to_string(std::max(min_props, max_props)));
  }
  // Additional properties: none, a schema, or anything; their key is any
  // other string, or what propertyNames / patternProperties allow.
  std::string addl;        // value expr; empty = not allowed
  std::string addl_key;    // key expr; empty = any key that differs from the declared ones
  std::string pattern_kv;  // with patternProperties: the members beside the declared ones ("" none)
  if (!patterns.empty()) {
    if (s.contains("propertyNames"))
      unsupported("patternProperties", ptr, "combined with propertyNames (keys would be checked against both)");
    // Keys no pattern matches take additionalProperties (absent: any
    // value, or, in strict mode, no such key).
    const Json additional = s.contains("additionalProperties") ? s["additionalProperties"] : Json(!opt_.strict);
    std::vector<std::string> names = forbidden;
    for (auto& p : props) names.push_back(p.first);
    pattern_kv = pattern_members(patterns, names, additional, ptr, hint);
  } else if (names) {
    // Added keys: the names' language without the declared ones; their
    // value as additionalProperties says (absent: any, or none when strict).
    std::vector<std::string> declared = forbidden;
    for (auto& p : props) declared.push_back(p.first);
    addl_key = key_names_except(*names, declared, ptr, hint + "_name");
    const Json a = s.contains("additionalProperties") ? s["additionalProperties"] : Json(!opt_.strict);
    if (addl_key.empty() || a == Json(false))
      addl.clear();
    else
      addl = any_value(a) ? basic("json_value") : visit(a, pointer_child(ptr, "additionalProperties"), hint + "_addl");
  } else if (s.contains("propertyNames")) {
    const std::string pn_ptr = pointer_child(ptr, "propertyNames");
    Json name_schema = s["propertyNames"];
    if (!name_schema.is_object()) unsupported("propertyNames", ptr, "expected a schema object");
    if (!name_schema.contains("type")) name_schema["type"] = "string";
    if (name_schema["type"] != "string")
      unsupported("propertyNames", pn_ptr, "property names are strings: expected type string");
    addl_key = visit(name_schema, pn_ptr, hint + "_name");
    if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      if (a.is_boolean())
        addl = a.get<bool>() ? basic("json_value") : "";
      else
        addl = visit(a, pointer_child(ptr, "additionalProperties"), hint + "_addl");
    } else {
      addl = basic("json_value");
    }
  } else if (s.contains("additionalProperties")) {
    const Json& a = s["additionalProperties"];
    if (a.is_boolean())
      addl = a.get<bool>() ? basic("json_value") : "";
    else
      addl = visit(a, pointer_child(ptr, "additionalProperties"), hint + "_addl");
  } else if (!has_props && required.empty() && !counted && forbidden.empty()) {
    return basic("json_object");  // unconstrained object
  } else if (!opt_.strict || (!has_props && required.empty())) {
    addl = basic("json_value");
  }
  std::vector<bool> req;
  std::vector<std::string> kv;
  for (auto& [k, v] : props) {
    req.push_back(required.count(k) > 0);
    kv.push_back(ebnf_quote(Json(k).dump()) + colon() + v);
  }
  std::string addl_kv;
  if (!addl.empty()) {
    if (addl_key.empty()) {
      std::vector<std::string> keys;
      for (auto& p : props) keys.push_back(p.first);
      keys.insert(keys.end(), forbidden.begin(), forbidden.end());
      addl_key = add_rule(hint + "_addl_key", excluded_key(keys));
    }
    addl_kv = addl_key + colon() + addl;
  }
  if (!patterns.empty()) addl_kv = pattern_kv;
  const int64_t n = static_cast<int64_t>(kv.size());
  // rest(i, c): what may follow once c >= 1 members are out, from declared
  // property i on (nullopt: nothing can satisfy min/maxProperties). The
  // count only matters up to max (or up to min when there is no max).
  // Computed depth-first with an explicit stack (post-order, the order a
  // recursion would make the rules in): n may be thousands of properties.
  using Key = std::pair<int64_t, int64_t>;
  std::map<Key, std::optional<std::string>> memo;
  auto normal = [&](int64_t c) { return max_props < 0 ? std::min(c, min_props) : c; };
  auto rest = [&](int64_t i0, int64_t c0) -> std::optional<std::string> {
    const Key wanted{i0, normal(c0)};
    std::vector<Key> stack{wanted};
    while (!stack.empty()) {
      const auto [i, c] = stack.back();
      if (memo.count({i, c})) {
        stack.pop_back();
        continue;
      }
      std::optional<Key> skip_key, take_key;  // rest(i + 1, c) and rest(i + 1, c + 1)
      if (i < n) {
        if (!req[i]) skip_key = Key{i + 1, c};
        if (max_props < 0 || c < max_props) take_key = Key{i + 1, normal(c + 1)};
        bool pending = false;
        for (const std::optional<Key>& kid : {take_key, skip_key})  // pushed last = computed first
          if (kid && !memo.count(*kid)) {
            stack.push_back(*kid);
            pending = true;
          }
        if (pending) continue;
      }
      stack.pop_back();
      std::optional<std::string> out;
      if (i == n) {
        const int64_t need = std::max<int64_t>(0, min_props - c);
        const int64_t room = max_props >= 0 ? max_props - c : -1;
        if (addl_kv.empty() || room == 0) {
          if (need == 0) out = "\"\"";
        } else if (room < 0 || need <= room) {
          out = "(" + comma() + addl_kv + "){" + std::to_string(need) + "," + (room >= 0 ? std::to_string(room) : "") +
                "}";
          if (!counted) out = "(" + comma() + addl_kv + ")*";
        }
      } else {
        std::vector<std::string> alts;
        if (skip_key && memo[*skip_key]) alts.push_back(*memo[*skip_key]);
        if (take_key && memo[*take_key]) alts.push_back(comma() + kv[i] + " " + *memo[*take_key]);
        if (!alts.empty()) {
          std::string body;
          for (auto& a : alts) body += (body.empty() ? "" : " | ") + a;
          out = add_rule(hint + "_rest", body);
        }
      }
      memo[{i, c}] = std::move(out);
    }
    return memo[wanted];
  };
  // The first member is declared property i (all before it skipped) or,
  // when every declared property is optional, an additional one.
  std::vector<std::string> alternatives;
  bool all_optional = true;
  for (int64_t i = 0; i < n && max_props != 0; ++i) {
    auto after = rest(i + 1, 1);
    if (after) alternatives.push_back(kv[i] + " " + *after);
    if (req[i]) {
      all_optional = false;
      break;
    }
  }
  if (all_optional && !addl_kv.empty() && max_props != 0) {
    auto after = rest(n, 1);
    if (after) alternatives.push_back(addl_kv + " " + *after);
  }
  std::string body;
  if (!alternatives.empty()) {
    std::string members;
    for (auto& a : alternatives) members += (members.empty() ? "" : " | ") + a;
    body = open('{') + "(" + members + ")" + close('}');
  }
  if (all_optional && min_props == 0) body += (body.empty() ? "" : " | ") + open('{') + "\"}\"";
  if (body.empty())
    unsupported(s.contains("minProperties") ? "minProperties" : "maxProperties", ptr,
                "no object satisfies the property counts with the allowed properties");
  return add_rule(hint + "_obj", body);
}

// patternProperties: each pattern's keys as a DFA over their characters
// (a search, as for a string's `pattern`: ^x- admits x-anything).
std::vector<SchemaConverter::KeyPattern> SchemaConverter::key_patterns(const Json& s, const std::string& ptr) {
  std::vector<KeyPattern> out;
  if (!s.contains("patternProperties")) return out;
  const Json& pp = s["patternProperties"];
  const std::string pp_ptr = pointer_child(ptr, "patternProperties");
  if (!pp.is_object()) unsupported("patternProperties", ptr, "expected an object");
  if (pp.size() > kMaxKeyPatterns)
    unsupported("patternProperties", ptr,
                "expected at most " + std::to_string(kMaxKeyPatterns) + " patterns (keys are told apart by the set " +
                    "of patterns they match, 2^n sets), found " + std::to_string(pp.size()));
  for (auto& [pattern, schema] : pp.items()) {
    KeyPattern kp{pattern, schema, pointer_child(pp_ptr, pattern), {}};
    try {
      kp.keys = regex_search_dfa(pattern, {.inside_json_string = true});
    } catch (const Error& e) {
      unsupported("patternProperties", kp.ptr, e.what());
    }
    out.push_back(std::move(kp));
  }
  return out;
}

Json SchemaConverter::both_schemas(const Json& a, const Json& b, const std::string& keyword, const std::string& ptr,
                                   const std::string& what) {
  if (any_value(b)) return a;
  if (any_value(a)) return b;
  if (a == Json(false) || b == Json(false)) return Json(false);
  Json x = follow_refs(a, ptr), y = follow_refs(b, ptr);
  if (any_value(y)) return a;
  if (any_value(x)) return b;
  if (x == Json(false) || y == Json(false)) return Json(false);
  // JSON types: a value has one (an integer-valued number is an integer
  // and a number), so two type lists meet in their common types.
  if (x.is_object() && y.is_object() && x.contains("type") && y.contains("type") && x["type"] != y["type"]) {
    const std::vector<std::string> tx = type_list(x["type"], ptr), ty = type_list(y["type"], ptr);
    auto has = [](const std::vector<std::string>& l, const std::string& t) {
      return std::find(l.begin(), l.end(), t) != l.end();
    };
    Json common = Json::array();
    for (const char* name : {"null", "boolean", "object", "array", "number", "integer", "string"}) {
      const std::string t = name;
      const bool in_x = has(tx, t) || (t == "integer" && has(tx, "number"));
      const bool in_y = has(ty, t) || (t == "integer" && has(ty, "number"));
      if (in_x && in_y && !(t == "integer" && has(tx, "number") && has(ty, "number"))) common.push_back(t);
    }
    if (common.empty()) return Json(false);
    x["type"] = y["type"] = common.size() == 1 ? common[0] : common;
  }
  const std::optional<Json> merged = intersect_schemas(x, y, ptr);
  if (!merged)
    unsupported(keyword, ptr,
                what +
                    "; expected schemas that merge into one (properties, required, types, values, or keywords "
                    "only one side uses)");
  return *merged;
}

// unevaluatedProperties where the evaluated keys are known statically: the
// schema and the allOf branches and $refs it applies in place (2019-09 on,
// a $ref beside other keywords is one more allOf branch) evaluate exactly
// the keys of their properties and patternProperties, or every key when
// one has additionalProperties. With an applicator whose evaluated keys
// depend on which branch holds (anyOf, oneOf, if, dependentSchemas,
// dependencies) it is refused. So it is the additionalProperties of the
// merged schema, or, when every key is evaluated, nothing.
Json SchemaConverter::close_unevaluated(const Json& s, const std::string& ptr) {
  Json rest = s;
  rest.erase("unevaluatedProperties");
  if (rest.contains("$ref")) {
    Json parts = rest.contains("allOf") ? rest["allOf"] : Json::array();
    parts.insert(parts.begin(), Json{{"$ref", rest["$ref"]}});
    rest.erase("$ref");
    rest["allOf"] = std::move(parts);
  }
  const Json& unevaluated = s["unevaluatedProperties"];
  if (any_value(unevaluated)) return rest;
  bool every_key = false;
  std::vector<const Json*> todo{&rest};
  for (size_t visited = 0; !todo.empty(); ++visited) {
    if (visited > 4096)
      unsupported("unevaluatedProperties", ptr, "expected at most 4096 schemas applied in place (allOf, $ref)");
    const Json& e = follow_refs(*todo.back(), ptr);
    todo.pop_back();
    if (!e.is_object()) continue;
    for (const char* k : {"anyOf", "oneOf", "if", "dependentSchemas", "dependencies", "unevaluatedProperties"})
      if (e.contains(k))
        unsupported("unevaluatedProperties", ptr,
                    std::string("the keys it leaves depend on which branch of '") + k +
                        "' holds; expected properties, patternProperties, additionalProperties, allOf and $ref "
                        "around it");
    every_key = every_key || e.contains("additionalProperties");
    if (e.contains("allOf") && e["allOf"].is_array())
      for (const Json& part : e["allOf"]) todo.push_back(&part);
  }
  if (every_key) return rest;
  // The merged schema's own additionalProperties (one beside allOf would be
  // one more conjunct, closing the object to the keys declared beside it).
  if (rest.contains("allOf")) rest = merge_all_of(rest, ptr);
  if (!rest.is_object() || rest.contains("allOf"))
    unsupported("unevaluatedProperties", ptr, "expected allOf branches that merge into one object schema");
  rest["additionalProperties"] = unevaluated;
  return rest;
}

std::string SchemaConverter::pattern_members(const std::vector<KeyPattern>& patterns,
                                             const std::vector<std::string>& names, const Json& additional,
                                             const std::string& ptr, const std::string& hint) {
  // Python's $ (what validators run) also matches before a final newline,
  // ECMA-262's only at the very end: where a key must not match a pattern
  // with a $, keys ending in a newline are left out, so a key's kind is the
  // same in both readings.
  const RegexDfa newline_end = regex_search_dfa("\\n$", {.inside_json_string = true});
  std::vector<std::string> members;
  for (uint32_t set = 0; set < (1u << patterns.size()); ++set) {
    // Keys matching exactly the patterns of `set`: their value matches each
    // one's schema; keys matching none take additionalProperties.
    Json value = set == 0 ? additional : Json(true);
    std::vector<const RegexDfa*> all, none;
    std::string value_ptr = pointer_child(ptr, "additionalProperties"), what;
    bool dollar_excluded = false;
    for (size_t i = 0; i < patterns.size(); ++i) {
      if (!(set >> i & 1)) {
        none.push_back(&patterns[i].keys);
        dollar_excluded = dollar_excluded || patterns[i].pattern.find('$') != std::string::npos;
        continue;
      }
      all.push_back(&patterns[i].keys);
      what += (what.empty() ? "keys matching '" : "' and '") + patterns[i].pattern;
      value = both_schemas(value, patterns[i].schema, "patternProperties", patterns[i].ptr,
                           what + "' must match each pattern's schema");
      value_ptr = patterns[i].ptr;
    }
    if (value == Json(false)) continue;
    // The declared names the region's patterns match (the others are not in it anyway).
    std::vector<std::string> taken;
    for (const std::string& n : names)
      if (std::all_of(all.begin(), all.end(), [&](const RegexDfa* d) { return regex_dfa_accepts(*d, n); }))
        taken.push_back(n);
    const std::string v_hint = hint + "_pp";
    if (all.size() == 1 && none.empty() && taken.empty()) {
      // One pattern's keys as they are: its plain expression (counted
      // repetitions stay counted), else its DFA.
      std::string body;
      try {
        body = regex_to_ebnf_expr(search_pattern(patterns[std::countr_zero(set)].pattern), /*inside_json_string=*/true);
      } catch (const Error&) {
      }
      const std::string key = body.empty() ? dfa_string_rule(*all[0], hint + "_key") : string_rule(hint + "_key", body);
      members.push_back(key + colon() + (any_value(value) ? basic("json_value") : visit(value, value_ptr, v_hint)));
      continue;
    }
    const RegexDfa declared = regex_dfa_of_strings(taken);
    if (!taken.empty()) none.push_back(&declared);
    if (dollar_excluded) none.push_back(&newline_end);
    RegexDfa keys;
    try {
      keys = regex_dfa_product(all, none);
    } catch (const Error& e) {
      unsupported("patternProperties", ptr, e.what());
    }
    if (keys.states.empty()) continue;
    const std::string v = any_value(value) ? basic("json_value") : visit(value, value_ptr, v_hint);
    members.push_back(dfa_string_rule(keys, hint + "_key") + colon() + v);
  }
  if (members.size() <= 1) return members.empty() ? "" : members[0];
  std::string body;
  for (const std::string& m : members) body += (body.empty() ? "" : " | ") + m;
  return add_rule(hint + "_member", body);
}

}  // namespace brioche::grammar::schema
