// JSON Schema `not`, and the string-exclusion tries it and closed objects
// use: keys that differ from the declared ones, values that are none of
// an excluded list.

#include <algorithm>
#include <cmath>

#include "grammar/schema_converter.h"
#include "grammar/utf8.h"

namespace brioche::grammar::schema {

// `not` where a grammar can say it exactly, by rewriting the schema
// without it:
//   not {type: T}          the sibling's types (all six when none) minus T
//                          (number takes integer with it; "number but not
//                          integer" is refused);
//   not {enum|const: ...}  next to an enum/const: those values dropped;
//                          next to a plain {type: string}: any string but
//                          those (excluded_value);
//   not {pattern: P}       next to {type: string} (and its own pattern,
//                          lengths): strings P finds no match in, a
//                          negative lookahead over the whole string; so
//                          is not {anyOf: [{pattern: P1}, ...]}: none of
//                          them finds one;
// anything else (not {required}, ...) is refused with the
// pointer, as before.
std::string SchemaConverter::visit_not(const Json& s, const std::string& ptr, const std::string& hint) {
  const std::string not_ptr = pointer_child(ptr, "not");
  const Json& n = s["not"];
  Json rest = s;
  rest.erase("not");
  // The refusal's message (unsupported() itself is [[noreturn]]; a lambda
  // calling it is not, and would leave the function's end reachable).
  auto refusal = [](const std::string& why) {
    return why +
           "; expected not {type}, not {enum/const} beside an enum, a const or a plain string type, or not {pattern} "
           "beside a string type";
  };
  if (!n.is_object()) unsupported("not", ptr, refusal("found " + n.dump().substr(0, 80)));
  if (rest.contains("$ref") || rest.contains("allOf")) unsupported("not", ptr, refusal("not beside $ref or allOf"));
  std::vector<std::string> keys;
  for (auto& [k, v] : n.items())
    if (!is_annotation(k)) keys.push_back(k);
  // not {required: [k]} (a type object beside it changes nothing): an
  // object without k. Non-objects satisfy any `required`, so `not` rejects
  // them: the schema around must be an object schema.
  bool object_test = keys.size() == 1 || (keys.size() == 2 && n.contains("type") && n["type"] == "object");
  if (object_test && n.contains("required") && n["required"].is_array() && n["required"].size() == 1 &&
      n["required"][0].is_string() && !rest.contains("const") && !rest.contains("enum")) {
    const std::string key = n["required"][0].get<std::string>();
    bool object_only = rest.contains("type") ? rest["type"] == "object"
                                             : rest.contains("properties") || rest.contains("required") ||
                                                   rest.contains("additionalProperties");
    if (!object_only)
      unsupported("not", ptr,
                  refusal("not {required} rejects every value that is not an object; expected it on an object schema "
                          "(\"type\": \"object\")"));
    if (rest.contains("required") && rest["required"].is_array() &&
        std::find(rest["required"].begin(), rest["required"].end(), Json(key)) != rest["required"].end())
      unsupported("not", ptr,
                  "not {required: [\"" + key + "\"]} beside required: [\"" + key + "\"]: the schema matches nothing");
    // Strict mode closes an object that declares properties: keep the
    // schema's own openness when declaring the forbidden key.
    if (opt_.strict && !rest.contains("additionalProperties"))
      rest["additionalProperties"] = !((rest.contains("properties") && !rest["properties"].empty()) ||
                                       (rest.contains("required") && !rest["required"].empty()));
    if (!rest.contains("properties")) rest["properties"] = Json::object();
    rest["properties"][key] = false;
    rest["type"] = "object";
    return visit(rest, ptr, hint);
  }
  if (keys.size() == 1 && keys[0] == "type") {
    std::vector<std::string> excluded = type_list(n["type"], not_ptr);
    if (std::find(excluded.begin(), excluded.end(), "number") != excluded.end()) excluded.push_back("integer");
    std::vector<std::string> allowed;
    if (rest.contains("type")) {
      allowed = type_list(rest["type"], ptr);
    } else {
      allowed = {"null", "boolean", "object", "array", "number", "string"};
    }
    std::vector<std::string> kept;
    for (const std::string& t : allowed) {
      if (t == "number" && std::find(excluded.begin(), excluded.end(), "integer") != excluded.end() &&
          std::find(excluded.begin(), excluded.end(), "number") == excluded.end())
        unsupported("not", ptr, refusal("'number but not integer' is not a grammar this converter writes"));
      if (std::find(excluded.begin(), excluded.end(), t) == excluded.end()) kept.push_back(t);
    }
    if (kept.empty()) unsupported("not", ptr, "no type is left: the schema matches nothing");
    if (rest.contains("const") || rest.contains("enum")) {  // the listed values of a type left
      Json values = Json::array();
      for (const Json& v : rest.contains("const") ? Json::array({rest["const"]}) : rest["enum"])
        if (std::any_of(kept.begin(), kept.end(), [&](const std::string& t) { return has_type(v, t); }))
          values.push_back(v);
      if (values.empty())
        unsupported("not", ptr, "every allowed value has an excluded type: the schema matches nothing");
      rest.erase("const");
      rest["enum"] = values;
    }
    rest["type"] = kept.size() == 1 ? Json(kept[0]) : Json(kept);
    return visit(rest, ptr, hint);
  }
  // not {pattern} or not {anyOf: [{pattern}, ...]} (no excluded pattern matches).
  std::vector<std::string> excluded_patterns;
  if (keys.size() == 1 && keys[0] == "pattern" && n["pattern"].is_string()) excluded_patterns.push_back(n["pattern"]);
  if (keys.size() == 1 && keys[0] == "anyOf" && n["anyOf"].is_array() && !n["anyOf"].empty())
    for (const Json& branch : n["anyOf"]) {
      bool only_pattern = branch.is_object() && branch.contains("pattern") && branch["pattern"].is_string();
      if (only_pattern)
        for (auto& [k, v] : branch.items())
          only_pattern = only_pattern && (k == "pattern" || (k == "type" && v == "string") || is_annotation(k));
      if (!only_pattern) {
        excluded_patterns.clear();
        break;
      }
      excluded_patterns.push_back(branch["pattern"]);
    }
  if (!excluded_patterns.empty() && rest.contains("type") && rest["type"] == "string" && !rest.contains("enum") &&
      !rest.contains("const")) {
    // Strings in which the sibling pattern (if any) finds a match and no
    // excluded one finds one: the searches as lookaheads from the start,
    // one pattern with assertions (regex_dfa.h). Python's $ (what
    // validators run) also matches before a final newline, ECMA-262's only
    // at the very end: strings ending in a newline are left out where an
    // excluded pattern has a $, so both readings exclude alike. Beside a
    // format the combined pattern meets the format's language
    // (format_and_pattern; a format with no regular form is refused there).
    std::string combined = "^";
    if (rest.contains("pattern") && rest["pattern"].is_string())
      combined += "(?=[\\s\\S]*(?:" + rest["pattern"].get<std::string>() + "))";
    bool dollar = false;
    for (const std::string& p : excluded_patterns) {
      combined += "(?![\\s\\S]*(?:" + p + "))";
      dollar = dollar || p.find('$') != std::string::npos;
    }
    if (dollar) combined += "(?![\\s\\S]*\\n$)";
    rest["pattern"] = combined;
    return visit(rest, ptr, hint);
  }
  if (keys.size() == 1 && (keys[0] == "enum" || keys[0] == "const")) {
    const Json values = keys[0] == "const" ? Json::array({n["const"]}) : n["enum"];
    if (!values.is_array()) unsupported("enum", not_ptr, "expected an array");
    auto excluded = [&](const Json& v) { return std::find(values.begin(), values.end(), v) != values.end(); };
    if (rest.contains("const") || rest.contains("enum")) {
      Json kept = Json::array();
      for (const Json& v : rest.contains("const") ? Json::array({rest["const"]}) : rest["enum"])
        if (!excluded(v)) kept.push_back(v);
      if (kept.empty()) unsupported("not", ptr, "every allowed value is excluded: the schema matches nothing");
      rest.erase("const");
      rest["enum"] = kept;
      return visit(rest, ptr, hint);
    }
    // Values of no type the sibling allows exclude nothing.
    if (rest.contains("type")) {
      const std::vector<std::string> types = type_list(rest["type"], ptr);
      bool relevant = false;
      for (const Json& v : values)
        relevant =
            relevant || std::any_of(types.begin(), types.end(), [&](const std::string& t) { return has_type(v, t); });
      if (!relevant) return visit(rest, ptr, hint);
    }
    bool plain_string = rest.contains("type") && rest["type"] == "string";
    for (auto& [k, v] : rest.items()) plain_string = plain_string && (k == "type" || is_annotation(k));
    if (plain_string) {
      std::vector<std::string> strings;
      for (const Json& v : values)
        if (v.is_string()) strings.push_back(v.get<std::string>());
      if (strings.empty()) return visit(rest, ptr, hint);
      return add_rule(hint + "_not", excluded_value(strings) + " " + string_lookahead());
    }
    unsupported(
        "not", ptr,
        refusal("not {" + keys[0] + "} is enforced only beside an enum, a const or a plain {\"type\": \"string\"}"));
  }
  // not {anyOf: [X, Y]} is not X and not Y; a `not` of an object test
  // (required keys, properties with const/enum values) beside an object
  // schema is "if X then nothing": conditions, split case by case.
  bool object_schema = rest.contains("type") ? rest["type"] == "object"
                                             : rest.contains("properties") || rest.contains("required") ||
                                                   rest.contains("additionalProperties");
  const bool any_of_only = keys.size() == 1 && keys[0] == "anyOf" && n["anyOf"].is_array() && !n["anyOf"].empty();
  auto is_object_test = [](const Json& x) {
    bool test = x.is_object();
    if (test)
      for (auto& [k, v] : x.items())
        test = test && (k == "required" || k == "properties" || k == "type" || is_annotation(k));
    return test;
  };
  bool tests_objects = !keys.empty() && is_object_test(n);
  // not {allOf: [X, Y]} of object tests is not (X and Y): the one test that
  // requires what both require and tests each property both test (a
  // property tested by both, differently, is refused below).
  Json all_of_test;
  if (keys.size() == 1 && keys[0] == "allOf" && n["allOf"].is_array() && !n["allOf"].empty()) {
    all_of_test = Json{{"type", "object"}, {"required", Json::array()}, {"properties", Json::object()}};
    for (const Json& part : n["allOf"]) {
      if (!is_object_test(part) || (part.contains("type") && part["type"] != "object")) {
        all_of_test = Json();
        break;
      }
      for (const Json& r : part.value("required", Json::array()))
        if (std::find(all_of_test["required"].begin(), all_of_test["required"].end(), r) ==
            all_of_test["required"].end())
          all_of_test["required"].push_back(r);
      const Json properties = part.value("properties", Json::object());
      for (auto& [k, v] : properties.items()) {
        if (all_of_test["properties"].contains(k) && all_of_test["properties"][k] != v) {
          all_of_test = Json();
          break;
        }
        all_of_test["properties"][k] = v;
      }
      if (all_of_test.is_null()) break;
    }
  }
  if (object_schema && !rest.contains("const") && !rest.contains("enum") &&
      (any_of_only || tests_objects || !all_of_test.is_null())) {
    Json conditions = Json::array();
    if (any_of_only)
      for (const Json& x : n["anyOf"]) conditions.push_back(Json{{"not", x}});
    else
      conditions.push_back(Json{{"not", all_of_test.is_null() ? n : all_of_test}});
    rest["allOf"] = conditions;
    return visit(rest, ptr, hint);
  }
  unsupported("not", ptr,
              refusal(keys.empty() ? "an empty not matches nothing"
                                   : "not {" + keys[0] + (keys.size() > 1 ? ", ..." : "") + "}"));
}

// Whether a JSON value is an instance of JSON Schema type `t`.
bool SchemaConverter::has_type(const Json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "string") return v.is_string();
  if (t == "array") return v.is_array();
  if (t == "object") return v.is_object();
  if (t == "number") return v.is_number();
  if (t == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>());
  return false;
}

std::vector<std::string> SchemaConverter::type_list(const Json& t, const std::string& ptr) {
  std::vector<std::string> out;
  if (t.is_string())
    out.push_back(t.get<std::string>());
  else if (t.is_array())
    for (auto& x : t) out.push_back(x.get<std::string>());
  else
    unsupported("type", ptr, "expected a string or an array of strings");
  return out;
}

// A trie over the codepoints of `texts`, and one rule per node named by
// node_rule(node, rule names of the nodes so far), children first: post-
// order with an explicit stack (a text may be thousands of characters
// long, one trie level each). Returns the root's rule.
template <class NodeRule>
std::string SchemaConverter::trie_rules(const std::vector<std::string>& texts, NodeRule node_rule) {
  std::vector<TrieNode> trie(1);
  for (const std::string& t : texts) {
    int cur = 0;
    for (size_t i = 0; i < t.size();) {
      uint32_t cp;
      const size_t len = decode_utf8(t, i, &cp);
      if (len == 0) break;
      i += len;
      auto it = trie[cur].kids.find(cp);
      if (it == trie[cur].kids.end()) {
        trie.emplace_back();
        it = trie[cur].kids.emplace(cp, static_cast<int>(trie.size() - 1)).first;
      }
      cur = it->second;
    }
    trie[cur].terminal = true;
  }
  std::vector<std::string> rule_of(trie.size());
  std::vector<std::pair<int, bool>> stack{{0, false}};  // node, children done
  while (!stack.empty()) {
    const auto [node, kids_done] = stack.back();
    stack.pop_back();
    if (!kids_done) {
      stack.emplace_back(node, true);
      for (auto it = trie[node].kids.rbegin(); it != trie[node].kids.rend(); ++it)
        stack.emplace_back(it->second, false);
      continue;
    }
    rule_of[node] = node_rule(trie[node], rule_of);
  }
  return rule_of[0];
}

// A JSON string token (quotes included) whose raw text differs from each
// of `keys`: a trie over the keys' codepoints where leaving the trie is
// free and ending on a full key is not.
std::string SchemaConverter::excluded_key(const std::vector<std::string>& keys) {
  // The rest of a key once it differs from every declared key: its own
  // rule with a lookahead (a key is followed by blanks and ':'), shared by
  // every trie node (and, through the mask cache, by every grammar).
  if (key_rest_.empty())
    key_rest_ =
        add_rule("key_rest", "(" + basic("json_char") + ")* \"\\\"\" (= " + (ws_.empty() ? "" : ws_ + " ") + "\":\")");
  const std::string any_rest = key_rest_;
  std::vector<std::string> raw_keys;  // as JSON spells them (escapes included), without the quotes
  for (const std::string& k : keys) {
    const std::string raw = Json(k).dump();
    raw_keys.push_back(raw.substr(1, raw.size() - 2));
  }
  return "\"\\\"\" " + trie_rules(raw_keys, [&](const TrieNode& nd, const std::vector<std::string>& rule_of) {
           std::vector<std::string> alts;
           if (!nd.terminal) alts.push_back("\"\\\"\"");
           std::string cls = "[^\"\\\\\\x00-\\x1f";
           for (auto& [cp, kid] : nd.kids) {
             std::string c;
             append_utf8(c, cp);
             if (cp == '\\' || cp == ']' || cp == '-' || cp == '^' || cp == '[') cls += "\\";
             cls += c;
           }
           cls += "]";
           alts.push_back(cls + " " + any_rest);
           alts.push_back("\"\\\\\" " + basic("json_escape") + " " + any_rest);
           for (auto& [cp, kid] : nd.kids) {
             std::string c;
             append_utf8(c, cp);
             alts.push_back(ebnf_quote(c) + " " + rule_of[kid]);
           }
           // Its own rule with the key lookahead (blanks then ':'): not inlined,
           // so a key trie used at several places of an object is compiled once.
           std::string body;
           for (auto& a : alts) body += (body.empty() ? "" : " | ") + a;
           return add_rule("key_excl", "(" + body + ") (= " + (ws_.empty() ? "" : ws_ + " ") + "\":\")");
         });
}

// A JSON string token whose decoded value differs from each of `values`:
// a trie over the values' codepoints. Along it a character is read
// literally or as its simple escape (\" \\ \/ \n ...), and either way
// follows the trie; \uXXXX is not offered there (a value spelled that way
// is refused, never an excluded value admitted). Leaving the trie is free;
// closing the string on a whole excluded value is not.
std::string SchemaConverter::excluded_value(const std::vector<std::string>& values) {
  if (value_rest_.empty()) value_rest_ = add_rule("value_rest", "(" + basic("json_char") + ")* \"\\\"\"");
  const std::pair<char, uint32_t> kEscapes[] = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},  {'b', '\b'},
                                                {'f', '\f'}, {'n', '\n'},  {'r', '\r'}, {'t', '\t'}};
  return "\"\\\"\" " + trie_rules(values, [&](const TrieNode& nd, const std::vector<std::string>& rule_of) {
           std::vector<std::string> alts;
           if (!nd.terminal) alts.push_back("\"\\\"\"");
           std::string cls = "[^\"\\\\\\x00-\\x1f";
           for (auto& [cp, kid] : nd.kids) {
             if (cp < 0x20 || cp == '"' || cp == '\\') continue;  // never literal in JSON
             std::string c;
             append_utf8(c, cp);
             if (cp == ']' || cp == '-' || cp == '^' || cp == '[') cls += "\\";
             cls += c;
             alts.push_back(ebnf_quote(c) + " " + rule_of[kid]);
           }
           alts.push_back(cls + "] " + value_rest_);
           for (auto [letter, decoded] : kEscapes) {
             auto kid = nd.kids.find(decoded);
             alts.push_back(ebnf_quote(std::string("\\") + letter) + " " +
                            (kid == nd.kids.end() ? value_rest_ : rule_of[kid->second]));
           }
           std::string body;
           for (auto& a : alts) body += (body.empty() ? "" : " | ") + a;
           return add_rule("value_excl", "(" + body + ")");
         });
}

}  // namespace brioche::grammar::schema
