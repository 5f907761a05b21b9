// propertyNames beside declared keys (properties, required): every key of
// the object must satisfy it, the declared ones too. A declared key the
// names refuse cannot appear (as `properties: {k: false}`; required: the
// schema matches nothing), and the keys an object may add are the names'
// language without the declared keys: a DFA over the key's characters
// (regex_dfa.h's product).

#include <algorithm>

#include "grammar/schema_converter.h"
#include "grammar/utf8.h"

namespace brioche::grammar::schema {
namespace {

int64_t code_points(const std::string& text) {
  int64_t n = 0;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    const size_t len = decode_utf8(text, i, &cp);
    i += len > 0 ? len : 1;
    ++n;
  }
  return n;
}

}  // namespace

SchemaConverter::KeyNames SchemaConverter::key_names(const Json& s, const std::string& ptr) {
  const std::string pn_ptr = pointer_child(ptr, "propertyNames");
  const Json& names = follow_refs(s["propertyNames"], pn_ptr);
  KeyNames out;
  if (names.is_boolean()) {
    if (!names.get<bool>()) out.values = std::vector<std::string>{};  // no key at all
    return out;
  }
  if (!names.is_object()) unsupported("propertyNames", ptr, "expected a schema object");
  auto refuse = [&](const std::string& key) {
    unsupported("propertyNames", pn_ptr,
                "'" + key +
                    "' beside declared properties (expected type string, pattern, not {pattern}, enum, const, "
                    "minLength, maxLength)");
  };
  for (auto& [k, v] : names.items()) {
    if (is_annotation(k)) continue;
    if (k == "type") {
      if (v != Json("string")) unsupported("propertyNames", pn_ptr, "property names are strings: expected type string");
    } else if (k == "pattern" || k == "minLength" || k == "maxLength") {
    } else if (k == "enum" || k == "const") {
      std::vector<std::string> values;
      for (const Json& x : k == "const" ? Json::array({v}) : v)
        if (x.is_string()) values.push_back(x.get<std::string>());
      if (out.values) {  // both: the values in each
        std::vector<std::string> kept;
        for (const std::string& x : *out.values)
          if (std::find(values.begin(), values.end(), x) != values.end()) kept.push_back(x);
        values = kept;
      }
      out.values = values;
    } else if (k == "not") {
      bool only_pattern = v.is_object() && v.contains("pattern") && v["pattern"].is_string();
      for (auto& [nk, nv] : v.items()) only_pattern = only_pattern && (nk == "pattern" || is_annotation(nk));
      if (!only_pattern) refuse("not");
      out.excluded_pattern = v["pattern"].get<std::string>();
    } else {
      refuse(k);
    }
  }
  out.min_length = count_of(names, "minLength", pn_ptr, 0);
  out.max_length = count_of(names, "maxLength", pn_ptr, -1);
  try {
    if (names.contains("pattern"))
      out.pattern = regex_search_dfa(names["pattern"].get<std::string>(), {.inside_json_string = true});
    if (out.excluded_pattern) out.excluded = regex_search_dfa(*out.excluded_pattern, {.inside_json_string = true});
  } catch (const Error& e) {
    unsupported("propertyNames", pn_ptr, e.what());
  }
  return out;
}

bool SchemaConverter::key_name_admitted(const KeyNames& names, const std::string& key, const std::string& ptr) {
  // Python's $ (what validators run) also matches before a final newline,
  // ECMA-262's (the DFAs') only at the very end.
  if (!key.empty() && key.back() == '\n' && (names.pattern || names.excluded))
    unsupported("propertyNames", ptr,
                "declared key '" + key + "' ends in a newline, where Python's $ and ECMA-262's may differ");
  if (names.values && std::find(names.values->begin(), names.values->end(), key) == names.values->end()) return false;
  const int64_t n = code_points(key);
  if (n < names.min_length || (names.max_length >= 0 && n > names.max_length)) return false;
  if (names.pattern && !regex_dfa_accepts(*names.pattern, key)) return false;
  if (names.excluded && regex_dfa_accepts(*names.excluded, key)) return false;
  return true;
}

std::string SchemaConverter::key_names_except(const KeyNames& names, const std::vector<std::string>& declared,
                                              const std::string& ptr, const std::string& hint) {
  if (names.values) {
    std::string body;
    for (const std::string& v : *names.values)
      if (std::find(declared.begin(), declared.end(), v) == declared.end() && key_name_admitted(names, v, ptr))
        body += (body.empty() ? "" : " | ") + ebnf_quote(Json(v).dump());
    return body.empty() ? "" : add_rule(hint + "_key", body);
  }
  RegexDfa any;
  std::vector<const RegexDfa*> all, none;
  try {
    any = regex_search_dfa(
        "", {.inside_json_string = true, .min_length = names.min_length, .max_length = names.max_length});
  } catch (const Error& e) {
    unsupported("propertyNames", ptr, e.what());
  }
  all.push_back(&any);
  if (names.pattern) all.push_back(&*names.pattern);
  if (names.excluded) none.push_back(&*names.excluded);
  // Where a key must not match a pattern with a $, no key ends in a newline:
  // its verdict could differ between Python's reading and ECMA-262's.
  RegexDfa newline_end;
  if (names.excluded && names.excluded_pattern->find('$') != std::string::npos) {
    newline_end = regex_search_dfa("\\n$", {.inside_json_string = true});
    none.push_back(&newline_end);
  }
  const RegexDfa taken = regex_dfa_of_strings(declared);
  if (!declared.empty()) none.push_back(&taken);
  RegexDfa keys;
  try {
    keys = regex_dfa_product(all, none);
  } catch (const Error& e) {
    unsupported("propertyNames", ptr, e.what());
  }
  if (keys.states.empty()) return "";
  return dfa_string_rule(keys, hint + "_key");
}

}  // namespace brioche::grammar::schema
