// JSON Schema objects: properties, required, additionalProperties,
// min/maxProperties, patternProperties, propertyNames.

#include <algorithm>
#include <cctype>
#include <map>

#include "grammar/schema_converter.h"

namespace brioche::grammar::schema {

std::string SchemaConverter::visit_object(const Json& s, const std::string& ptr, const std::string& hint) {
  std::vector<std::pair<std::string, std::string>> props;  // raw key text, value expr
  std::set<std::string> required;
  std::vector<std::string> required_order;  // undeclared required keys come in this order
  if (s.contains("required")) {
    for (auto& r : s["required"])
      if (required.insert(r.get<std::string>()).second) required_order.push_back(r.get<std::string>());
  }
  std::vector<std::string> forbidden;  // `properties: {k: false}`: k may not appear (nor as an additional key)
  if (s.contains("properties")) {
    for (auto& [k, v] : s["properties"].items()) {
      if (v == Json(false)) {
        if (required.count(k))
          unsupported("required", ptr, "'" + k + "' is required and its schema is false: the schema matches nothing");
        forbidden.push_back(k);
        continue;
      }
      props.emplace_back(k, visit(v, pointer_child(pointer_child(ptr, "properties"), k), hint + "_" + k));
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
  std::string addl;      // value expr; empty = not allowed
  std::string addl_key;  // key expr; empty = any key that differs from the declared ones
  std::string other_kv;  // members whose key no patternProperties pattern matches (JSON Schema's reading)
  if (s.contains("patternProperties")) {
    const Json& pp = s["patternProperties"];
    const std::string pp_ptr = pointer_child(ptr, "patternProperties");
    if (!pp.is_object()) unsupported("patternProperties", ptr, "expected an object");
    if (pp.size() != 1)
      unsupported("patternProperties", ptr,
                  "only one pattern is implemented (a key matching several patterns must satisfy all their schemas)");
    if (has_props || !forbidden.empty() || !required.empty() || s.contains("propertyNames") ||
        (s.contains("additionalProperties") && s["additionalProperties"] != Json(false)))
      unsupported("patternProperties", ptr,
                  "combined with properties, required, propertyNames or additionalProperties other than false: "
                  "keys would need the complement of the pattern");
    auto [pattern, value_schema] = *pp.items().begin();
    addl_key = key_rule(hint, pattern, pp_ptr);
    addl = visit(value_schema, pointer_child(pp_ptr, pattern), hint + "_pp");
    // JSON Schema's reading: without additionalProperties, keys the pattern
    // does not match are allowed too, with any value: written where the
    // complement is simple (none for a pattern every key matches; keys
    // without any of a class's characters for a one-character search).
    if (!opt_.strict && !s.contains("additionalProperties")) {
      const std::optional<std::string> others = unmatched_keys(pattern);
      if (!others)
        unsupported("patternProperties", ptr,
                    "without additionalProperties: false, keys the pattern does not match are allowed too; keys "
                    "would need the complement of the pattern (written for patterns every key matches and "
                    "one-character searches like [a-z] or \\w)");
      if (!others->empty()) other_kv = key_rule(hint + "_other", *others, pp_ptr) + colon() + basic("json_value");
    }
  } else if (s.contains("propertyNames")) {
    const std::string pn_ptr = pointer_child(ptr, "propertyNames");
    if (has_props || !forbidden.empty() || !required.empty())
      unsupported("propertyNames", ptr,
                  "combined with properties/required: declared keys are not checked against propertyNames");
    Json names = s["propertyNames"];
    if (!names.is_object()) unsupported("propertyNames", ptr, "expected a schema object");
    if (!names.contains("type")) names["type"] = "string";
    if (names["type"] != "string")
      unsupported("propertyNames", pn_ptr, "property names are strings: expected type string");
    addl_key = visit(names, pn_ptr, hint + "_name");
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
    if (!other_kv.empty()) addl_kv = add_rule(hint + "_member", addl_kv + " | " + other_kv);
  }
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

// The keys a patternProperties pattern does not match, as a pattern: ""
// when every key matches it (.*, ^.*$, an empty pattern); for a search of
// one character of a class (`[a-z]`, `\w`, `x`, `.`, maybe with `+`), the
// keys made only of other characters; nullopt for anything else.
std::optional<std::string> SchemaConverter::unmatched_keys(const std::string& pattern) {
  static const std::set<std::string> kEveryKey = {"", "^", "$", ".*", "^.*", ".*$", "^.*$", "[\\s\\S]*", "^[\\s\\S]*$"};
  if (kEveryKey.count(pattern)) return std::string();
  std::string atom = pattern;
  if (!atom.empty() && atom.back() == '+' && (atom.size() < 2 || atom[atom.size() - 2] != '\\')) atom.pop_back();
  static const std::map<std::string, std::string> kEscapes = {{"\\w", "\\W"}, {"\\W", "\\w"}, {"\\d", "\\D"},
                                                              {"\\D", "\\d"}, {"\\s", "\\S"}, {"\\S", "\\s"}};
  if (auto it = kEscapes.find(atom); it != kEscapes.end()) return "^" + it->second + "*$";
  if (atom == ".") return std::string("^$");  // every key but the empty one
  if (atom.size() >= 3 && atom.front() == '[' && atom.back() == ']' && atom.find('[', 1) == std::string::npos &&
      atom.find(']') == atom.size() - 1 && atom[atom.size() - 2] != '\\') {
    const bool negated = atom[1] == '^';
    const std::string body = atom.substr(negated ? 2 : 1, atom.size() - (negated ? 3 : 2));
    if (body.empty()) return std::nullopt;
    return "^[" + std::string(negated ? "" : "^") + body + "]*$";
  }
  if (atom.size() == 1 && std::isalnum(static_cast<unsigned char>(atom[0]))) return "^[^" + atom + "]*$";
  return std::nullopt;
}

// A key (quotes included) whose content matches `pattern` (a search, as
// for a string's `pattern`: ^x- admits x-anything).
std::string SchemaConverter::key_rule(const std::string& hint, const std::string& pattern, const std::string& ptr) {
  std::string body;
  try {
    body = regex_to_ebnf_expr(search_pattern(pattern), /*inside_json_string=*/true);
  } catch (const Error& e) {
    unsupported("patternProperties", ptr, e.what());
  }
  return string_rule(hint + "_key", body);
}

}  // namespace brioche::grammar::schema
