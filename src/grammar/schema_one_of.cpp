// oneOf, exactly: a document must match exactly one branch. A grammar
// writes a union (anyOf); the union is oneOf exactly when no document can
// match two branches. That is proven here, pairwise, from what JSON Schema
// says each branch admits (never from what the converter compiles it to):
//   - their possible JSON types do not meet (integer-valued numbers and
//     other numbers counted apart, so integer/number meet at the integers);
//   - both list their values (const/enum) and no value is in both;
//   - both admit only objects and a property tells them apart: required by
//     one with a schema disjoint from the other's for it (a discriminator
//     such as "kind": "a" vs "kind": "b"), or required by one and
//     forbidden by the other.
// Anything else is not proven disjoint; the caller refuses it (or, when
// SchemaOptions::one_of_as_any_of, compiles the union).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "grammar/regex_dfa.h"
#include "grammar/schema_converter.h"
#include "grammar/utf8.h"

namespace brioche::grammar::schema {
namespace {

enum TypeBit : unsigned {
  kNull = 1,
  kBoolean = 2,
  kObject = 4,
  kArray = 8,
  kString = 16,
  kIntegral = 32,    // numbers with an integer value (1, 1.0, -3)
  kFractional = 64,  // other numbers
  kAllTypes = 127,
};

// Deep enough for discriminators nested a few levels; deeper is "unknown".
constexpr int kMaxDisjointDepth = 8;

unsigned type_bit(const std::string& t) {
  if (t == "null") return kNull;
  if (t == "boolean") return kBoolean;
  if (t == "object") return kObject;
  if (t == "array") return kArray;
  if (t == "string") return kString;
  if (t == "integer") return kIntegral;
  if (t == "number") return kIntegral | kFractional;
  return kAllTypes;  // an unknown name: the visit reports it; here nothing is assumed
}

unsigned value_bit(const Json& v) {
  if (v.is_null()) return kNull;
  if (v.is_boolean()) return kBoolean;
  if (v.is_object()) return kObject;
  if (v.is_array()) return kArray;
  if (v.is_string()) return kString;
  if (v.is_number_float()) return std::floor(v.get<double>()) == v.get<double>() ? kIntegral : kFractional;
  return kIntegral;
}

// The keywords that constrain values of one JSON type only (JSON Schema's
// validation vocabulary); a schema with them still admits every value of
// the other types its `type` lists. ("number" covers integers too.)
const std::map<std::string, std::string>& keyword_types() {
  static const std::map<std::string, std::string> kKeywordType = {{"minLength", "string"},
                                                                  {"maxLength", "string"},
                                                                  {"pattern", "string"},
                                                                  {"format", "string"},
                                                                  {"contentEncoding", "string"},
                                                                  {"contentMediaType", "string"},
                                                                  {"minimum", "number"},
                                                                  {"maximum", "number"},
                                                                  {"exclusiveMinimum", "number"},
                                                                  {"exclusiveMaximum", "number"},
                                                                  {"multipleOf", "number"},
                                                                  {"properties", "object"},
                                                                  {"required", "object"},
                                                                  {"additionalProperties", "object"},
                                                                  {"patternProperties", "object"},
                                                                  {"propertyNames", "object"},
                                                                  {"minProperties", "object"},
                                                                  {"maxProperties", "object"},
                                                                  {"dependentRequired", "object"},
                                                                  {"dependentSchemas", "object"},
                                                                  {"dependencies", "object"},
                                                                  {"unevaluatedProperties", "object"},
                                                                  {"items", "array"},
                                                                  {"prefixItems", "array"},
                                                                  {"additionalItems", "array"},
                                                                  {"contains", "array"},
                                                                  {"minContains", "array"},
                                                                  {"maxContains", "array"},
                                                                  {"minItems", "array"},
                                                                  {"maxItems", "array"},
                                                                  {"uniqueItems", "array"},
                                                                  {"unevaluatedItems", "array"}};
  return kKeywordType;
}

// The types a schema of only `type`/`nullable` and type-specific keywords
// lists (nullable adds null); nullopt for any other schema.
std::optional<std::vector<std::string>> listed_types(const Json& s) {
  if (!s.is_object() || !s.contains("type")) return std::nullopt;
  for (auto& [k, v] : s.items())
    if (k != "type" && k != "nullable" && !is_annotation(k) && !keyword_types().count(k)) return std::nullopt;
  std::vector<std::string> types;
  if (s["type"].is_string()) {
    types.push_back(s["type"].get<std::string>());
  } else if (s["type"].is_array()) {
    for (const Json& t : s["type"]) {
      if (!t.is_string()) return std::nullopt;
      types.push_back(t.get<std::string>());
    }
  } else {
    return std::nullopt;
  }
  if (s.contains("nullable") && s["nullable"] == Json(true) &&
      std::find(types.begin(), types.end(), "null") == types.end())
    types.push_back("null");
  return types;
}

// Whether `s` admits every value of type `t` (t not a number type).
bool admits_whole_type(const Json& s, const std::string& t) {
  const auto types = listed_types(s);
  if (!types || std::find(types->begin(), types->end(), t) == types->end()) return false;
  for (auto& [k, v] : s.items()) {
    auto it = keyword_types().find(k);
    if (it != keyword_types().end() && it->second == t) return false;
  }
  return true;
}

// JSON Schema's equality: numbers by value (1 == 1.0), the rest structurally.
bool same_value(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

// Whether `pattern` finds a match in `text` (decoded), as jsonschema reads
// patterns; nullopt when the pattern is not one the DFA builder reads.
std::optional<bool> pattern_finds(const std::string& pattern, const std::string& text) {
  // Each pattern's DFA is built once per thread (a schema may ask about
  // many keys against one propertyNames pattern); a bounded cache.
  thread_local std::map<std::string, std::optional<RegexDfa>> built;
  auto it = built.find(pattern);
  if (it == built.end()) {
    if (built.size() >= 64) built.clear();
    std::optional<RegexDfa> dfa;
    try {
      dfa = regex_search_dfa(pattern, RegexDfaOptions{});
    } catch (const Error&) {
    }
    it = built.emplace(pattern, std::move(dfa)).first;
  }
  if (!it->second) return std::nullopt;
  const RegexDfa& dfa = *it->second;
  int32_t state = 0;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    const size_t len = decode_utf8(text, i, &cp);
    if (len == 0) return std::nullopt;
    i += len;
    int32_t next = -1;
    for (const RegexDfa::Edge& e : dfa.states[size_t(state)].edges)
      for (const auto& [lo, hi] : e.chars)
        if (lo <= cp && cp <= hi) next = e.target;
    if (next < 0) return false;  // every state of the DFA can still accept: no edge is a dead end
    state = next;
  }
  return dfa.states[size_t(state)].accepting;
}

// Whether a propertyNames schema provably rejects the key `key` (false:
// admitted, or not known).
bool property_name_rejected(const Json& names, const std::string& key) {
  if (names == Json(false)) return true;
  if (!names.is_object()) return false;
  if (names.contains("const") && names["const"] != Json(key)) return true;
  if (names.contains("enum") && names["enum"].is_array() &&
      std::find(names["enum"].begin(), names["enum"].end(), Json(key)) == names["enum"].end())
    return true;
  if (names.contains("pattern") && names["pattern"].is_string() &&
      pattern_finds(names["pattern"].get<std::string>(), key) == std::optional<bool>(false))
    return true;
  if (names.contains("not") && names["not"].is_object()) {
    const Json& n = names["not"];
    bool only_pattern = n.contains("pattern") && n["pattern"].is_string();
    for (auto& [k, v] : n.items()) only_pattern = only_pattern && (k == "pattern" || is_annotation(k));
    if (only_pattern && pattern_finds(n["pattern"].get<std::string>(), key) == std::optional<bool>(true)) return true;
  }
  return false;
}

// Whether `s` has no keyword but `key` that constrains.
bool only_annotations_but(const Json& s, const char* key) {
  for (auto& [k, v] : s.items())
    if (k != key && !is_annotation(k)) return false;
  return true;
}

}  // namespace

// Follows a chain of $refs (siblings of a $ref can only narrow what it
// admits, so the target is a sound stand-in here).
const Json& SchemaConverter::follow_refs(const Json& s, const std::string& ptr) {
  const Json* cur = &s;
  for (int hops = 0; cur->is_object() && cur->contains("$ref") && (*cur)["$ref"].is_string() && hops < kMaxSchemaDepth;
       ++hops)
    cur = &resolve((*cur)["$ref"].get<std::string>(), ptr);
  return *cur;
}

// The JSON types a valid document may have (a superset: kAllTypes when
// nothing narrows it).
unsigned SchemaConverter::possible_types(const Json& s_in, const std::string& ptr, int depth) {
  const Json& s = follow_refs(s_in, ptr);
  if (s.is_boolean()) return s.get<bool>() ? static_cast<unsigned>(kAllTypes) : 0u;
  if (!s.is_object() || depth > kMaxDisjointDepth) return kAllTypes;
  unsigned types = kAllTypes;
  if (s.contains("const")) types &= value_bit(s["const"]);
  if (s.contains("enum") && s["enum"].is_array()) {
    unsigned bits = 0;
    for (const Json& v : s["enum"]) bits |= value_bit(v);
    types &= bits;
  }
  if (s.contains("type")) {
    unsigned bits = 0;
    if (s["type"].is_string())
      bits = type_bit(s["type"].get<std::string>());
    else if (s["type"].is_array())
      for (const Json& t : s["type"]) bits |= t.is_string() ? type_bit(t.get<std::string>()) : kAllTypes;
    else
      bits = kAllTypes;
    if (s.contains("nullable") && s["nullable"] == Json(true)) bits |= kNull;
    types &= bits;
  }
  if (s.contains("allOf") && s["allOf"].is_array())
    for (const Json& part : s["allOf"]) types &= possible_types(part, ptr, depth + 1);
  for (const char* key : {"anyOf", "oneOf"})
    if (s.contains(key) && s[key].is_array()) {
      unsigned any = 0;
      for (const Json& branch : s[key]) any |= possible_types(branch, ptr, depth + 1);
      types &= any;
    }
  return types;
}

// Whether no document is valid for both `a` and `b` (false: not proven).
bool SchemaConverter::provably_disjoint(const Json& a_in, const Json& b_in, const std::string& ptr, int depth) {
  if (depth > kMaxDisjointDepth) return false;
  const Json& a = follow_refs(a_in, ptr);
  const Json& b = follow_refs(b_in, ptr);
  const unsigned common = possible_types(a, ptr, depth) & possible_types(b, ptr, depth);
  if (common == 0) return true;
  auto values = [](const Json& s) -> std::optional<Json> {
    if (!s.is_object()) return std::nullopt;
    if (s.contains("const")) return Json::array({s["const"]});
    if (s.contains("enum") && s["enum"].is_array()) return s["enum"];
    return std::nullopt;
  };
  const std::optional<Json> va = values(a), vb = values(b);
  if (va || vb) {
    // A listed value the other side admits makes them meet; one side's
    // values all of a type the other excludes, or all absent from the
    // other's list, keeps them apart.
    const std::optional<Json>& listed = va ? va : vb;
    const Json& other = va ? b : a;
    const std::optional<Json>& other_values = va ? vb : va;
    bool apart = true;
    // Values the other side's `not {const/enum}` excludes.
    std::optional<Json> other_excluded;
    if (other.is_object() && other.contains("not") && other["not"].is_object()) {
      size_t listing = 0, others = 0;
      for (auto& [k, v] : other["not"].items()) {
        if (k == "const" || k == "enum")
          ++listing;
        else if (!is_annotation(k))
          ++others;
      }
      if (listing == 1 && others == 0) other_excluded = values(other["not"]);
    }
    for (const Json& v : *listed) {
      if (!(value_bit(v) & possible_types(other, ptr, depth))) continue;
      if (other_excluded &&
          std::any_of(other_excluded->begin(), other_excluded->end(), [&](const Json& w) { return same_value(v, w); }))
        continue;
      // A string the other side's pattern finds no match in (GitHub's
      // secrets: "inherit" against an expression ${{ ... }}).
      if (v.is_string() && other.is_object() && other.contains("pattern") && other["pattern"].is_string() &&
          pattern_finds(other["pattern"].get<std::string>(), v.get<std::string>()) == std::optional<bool>(false))
        continue;
      if (other_values &&
          std::none_of(other_values->begin(), other_values->end(), [&](const Json& w) { return same_value(v, w); }))
        continue;
      apart = false;
      break;
    }
    if (apart) return true;
  }
  // A union (anyOf/oneOf) admits at most what its alternatives admit (its
  // sibling keywords only narrow that): apart when every alternative is.
  for (const Json* side : {&a, &b}) {
    const Json& other = side == &a ? b : a;
    for (const char* key : {"anyOf", "oneOf"})
      if (side->is_object() && side->contains(key) && (*side)[key].is_array() && !(*side)[key].empty() &&
          std::all_of((*side)[key].begin(), (*side)[key].end(),
                      [&](const Json& alt) { return provably_disjoint(alt, other, ptr, depth + 1); }))
        return true;
  }
  if (common != kObject || !a.is_object() || !b.is_object()) return false;
  // Objects: a property that tells them apart.
  auto property = [](const Json& s, const std::string& key) -> const Json* {
    if (s.contains("properties") && s["properties"].is_object() && s["properties"].contains(key))
      return &s["properties"][key];
    return nullptr;
  };
  auto forbids = [&](const Json& s, const std::string& key) {
    if (s.contains("propertyNames") && property_name_rejected(s["propertyNames"], key)) return true;
    if (const Json* p = property(s, key)) return *p == Json(false);
    return s.contains("additionalProperties") && s["additionalProperties"] == Json(false) &&
           !s.contains("patternProperties");
  };
  // A closed object (additionalProperties false, no patternProperties) with
  // at least one key has a key of its declared ones: apart from an object
  // that forbids them all.
  for (const Json* side : {&a, &b}) {
    const Json& here = *side;
    const Json& there = side == &a ? b : a;
    const bool closed = here.contains("additionalProperties") && here["additionalProperties"] == Json(false) &&
                        !here.contains("patternProperties") && here.contains("properties") &&
                        here["properties"].is_object();
    if (!closed || count_of(here, "minProperties", ptr, 0) < 1) continue;
    bool all_forbidden = true;
    for (auto& [key, value] : here["properties"].items()) all_forbidden = all_forbidden && forbids(there, key);
    if (all_forbidden) return true;
  }
  for (const Json* side : {&a, &b}) {
    const Json& here = *side;
    const Json& there = side == &a ? b : a;
    if (!here.contains("required") || !here["required"].is_array()) continue;
    for (const Json& r : here["required"]) {
      if (!r.is_string()) continue;
      const std::string key = r.get<std::string>();
      if (forbids(there, key)) return true;
      // Required here: an object without it matches only `there`; one with
      // it matches both only with a value both schemas admit (`there` need
      // not require it: GitLab's when: delayed vs when: not delayed).
      const Json* pa = property(here, key);
      const Json* pb = property(there, key);
      if (pa && pb && provably_disjoint(*pa, *pb, ptr, depth + 1)) return true;
    }
  }
  return false;
}

}  // namespace brioche::grammar::schema

namespace brioche::grammar::schema {

// A value of a type that two branches admit whole matches both, so oneOf
// rejects every value of that type: the type leaves every branch, and the
// rest is checked for disjointness as usual. (Kubernetes' Quantity is
// oneOf [{"type": ["string", "null"]}, {"type": ["number", "null"]}]:
// strings and numbers, never null.) Only branches that list their types
// and constrain nothing but per-type keywords are rewritten; any other
// branch that may hold such a type leaves the list as it was (the caller
// then finds the overlap and reports it).
std::vector<std::pair<size_t, Json>> SchemaConverter::drop_shared_types(const std::vector<Json>& branches,
                                                                        const std::string& ptr) {
  std::vector<std::pair<size_t, Json>> unchanged;
  for (size_t i = 0; i < branches.size(); ++i) unchanged.emplace_back(i, branches[i]);
  std::vector<std::string> shared;
  for (const char* t : {"null", "boolean", "string", "object", "array"}) {
    const auto whole =
        std::count_if(branches.begin(), branches.end(), [&](const Json& b) { return admits_whole_type(b, t); });
    if (whole >= 2) shared.push_back(t);
  }
  if (shared.empty()) return unchanged;
  std::vector<std::pair<size_t, Json>> kept;
  for (size_t i = 0; i < branches.size(); ++i) {
    const Json& b = branches[i];
    const unsigned possible = possible_types(b, ptr, 0);
    const bool touches =
        std::any_of(shared.begin(), shared.end(), [&](const std::string& t) { return (possible & type_bit(t)) != 0; });
    if (!touches) {
      kept.emplace_back(i, b);
      continue;
    }
    const auto types = listed_types(b);
    if (!types) return unchanged;
    std::vector<std::string> rest;
    for (const std::string& t : *types)
      if (std::find(shared.begin(), shared.end(), t) == shared.end()) rest.push_back(t);
    if (rest.empty()) continue;  // admits only values oneOf rejects
    Json narrowed = b;
    narrowed.erase("nullable");
    narrowed["type"] = rest.size() == 1 ? Json(rest[0]) : Json(rest);
    kept.emplace_back(i, std::move(narrowed));
  }
  if (kept.empty())
    unsupported("oneOf", ptr, "every value its branches admit matches two of them: no document is valid");
  return kept;
}

}  // namespace brioche::grammar::schema

namespace brioche::grammar::schema {

// oneOf [{required: R_1}, ..., {required: R_n}] beside an object schema S:
// a document is valid when it satisfies S and exactly one R_i is all
// present. Which R_i are present depends only on P = the document's keys
// among U = R_1 u ... u R_n, so the valid documents are the union, over the
// subsets P of U that contain exactly one R_i (and S's required keys in
// U), of "S, with P required and U \ P absent". The shapes differ in some
// key's presence, so no document matches two: their union is exact.
// Whether `b` (an oneOf branch beside the object schema `s`) depends only on
// which keys are present and whether some of their values match a schema:
// required lists, combined by not/anyOf/oneOf/allOf, with type object and
// properties (any value, the schema `s` declares for the key, or one other
// schema per key: a value atom). Adds the keys and atoms it names to `atoms`.
bool SchemaConverter::presence_keys(const Json& s, const Json& b, PresenceAtoms& atoms, const std::string& ptr,
                                    int depth) {
  if (!b.is_object() || depth > 8) return false;
  auto add_key = [&](const std::string& key) {
    if (std::find(atoms.keys.begin(), atoms.keys.end(), key) == atoms.keys.end()) atoms.keys.push_back(key);
  };
  bool tests = false;
  for (auto& [k, v] : b.items()) {
    if (is_annotation(k) || (k == "type" && v == Json("object")) || (k == "additionalProperties" && only_true(v)))
      continue;
    if (k == "required") {
      if (!v.is_array()) return false;
      for (const Json& r : v) {
        if (!r.is_string()) return false;
        add_key(r.get<std::string>());
      }
      tests = true;
    } else if (k == "properties" && v.is_object()) {
      for (auto& [key, value] : v.items()) {
        if (only_true(value) ||
            (s.contains("properties") && s["properties"].is_object() && s["properties"].contains(key) &&
             follow_refs(value, ptr) == follow_refs(s["properties"][key], ptr)))
          continue;
        const std::string& name = key;  // (a lambda may not capture a structured binding before C++20)
        const auto same_key = [&](const std::pair<std::string, Json>& a) { return a.first == name; };
        const auto it = std::find_if(atoms.values.begin(), atoms.values.end(), same_key);
        if (it != atoms.values.end() && it->second != value) return false;  // one value atom per key
        if (it == atoms.values.end()) atoms.values.emplace_back(key, value);
        add_key(key);
        tests = true;
      }
    } else if (k == "not") {
      if (!presence_keys(s, v, atoms, ptr, depth + 1)) return false;
      tests = true;
    } else if ((k == "anyOf" || k == "oneOf" || k == "allOf") && v.is_array() && !v.empty()) {
      for (const Json& x : v)
        if (!presence_keys(s, x, atoms, ptr, depth + 1)) return false;
      tests = true;
    } else {
      return false;
    }
  }
  return tests || depth > 0;
}

// Whether a branch that presence_keys accepted holds on an object whose
// keys among atoms.keys are those of `bits` (bit i: keys[i] present), with
// the value atoms' answers in the bits after them.
bool SchemaConverter::presence_holds(const Json& b, const PresenceAtoms& atoms, uint32_t bits) {
  auto index = [&](const std::string& k) {
    return static_cast<size_t>(std::find(atoms.keys.begin(), atoms.keys.end(), k) - atoms.keys.begin());
  };
  if (b.contains("required"))
    for (const Json& r : b["required"])
      if ((bits >> index(r.get<std::string>()) & 1) == 0) return false;
  if (b.contains("properties"))
    for (size_t a = 0; a < atoms.values.size(); ++a) {
      const auto& [key, value] = atoms.values[a];
      if (b["properties"].contains(key) && b["properties"][key] == value && (bits >> index(key) & 1) != 0 &&
          (bits >> (atoms.keys.size() + a) & 1) == 0)
        return false;  // present, and its value does not match
    }
  if (b.contains("not") && presence_holds(b["not"], atoms, bits)) return false;
  if (b.contains("allOf"))
    for (const Json& x : b["allOf"])
      if (!presence_holds(x, atoms, bits)) return false;
  if (b.contains("anyOf") &&
      std::none_of(b["anyOf"].begin(), b["anyOf"].end(), [&](const Json& x) { return presence_holds(x, atoms, bits); }))
    return false;
  if (b.contains("oneOf") && std::count_if(b["oneOf"].begin(), b["oneOf"].end(),
                                           [&](const Json& x) { return presence_holds(x, atoms, bits); }) != 1)
    return false;
  return true;
}

// The values `s` rejects, as a schema, for the simple shapes whose
// complement the converter can say: type lists, a string with a pattern,
// and unions (anyOf, or oneOf proven disjoint) of those; nullopt otherwise.
// Per JSON type: a type no branch admits is in the complement whole; a type
// one branch admits whole is not in it; a string type one branch admits
// under a pattern leaves the strings that pattern finds no match in.
std::optional<Json> SchemaConverter::complement_schema(const Json& s_in, const std::string& ptr) {
  VisitScope scope(*this, ptr);  // a closed object's keys recurse: bounded like nesting
  const Json& s = follow_refs(s_in, ptr);
  if (!s.is_object()) return std::nullopt;
  std::vector<Json> branches;
  const char* union_key = s.contains("anyOf") ? "anyOf" : s.contains("oneOf") ? "oneOf" : nullptr;
  if (union_key) {
    if (!only_annotations_but(s, union_key) || !s[union_key].is_array()) return std::nullopt;
    for (const Json& b : s[union_key]) branches.push_back(follow_refs(b, ptr));
    if (std::string(union_key) == "oneOf")
      for (size_t i = 0; i < branches.size(); ++i)
        for (size_t j = i + 1; j < branches.size(); ++j)
          if (!provably_disjoint(branches[i], branches[j], ptr, 0)) return std::nullopt;
  } else {
    branches.push_back(s);
  }
  // For each JSON type: whole (admitted entirely), or the patterns admitted,
  // or (objects) the closed object schema admitted.
  std::map<std::string, bool> whole;
  std::map<std::string, std::vector<std::string>> patterns;
  const Json* closed = nullptr;
  for (const Json& b : branches) {
    if (!b.is_object() || !b.contains("type")) return std::nullopt;
    if (b["type"] == Json("object") && b.contains("additionalProperties") && b["additionalProperties"] == Json(false)) {
      for (auto& [k, v] : b.items())
        if (k != "type" && k != "additionalProperties" && k != "properties" && !is_annotation(k)) return std::nullopt;
      if (closed || (b.contains("properties") && (!b["properties"].is_object() || b["properties"].size() > 3)))
        return std::nullopt;
      closed = &b;
      continue;
    }
    const std::vector<std::string> types = type_list(b["type"], ptr);
    bool with_pattern = false;
    for (auto& [k, v] : b.items()) {
      if (k == "type" || is_annotation(k)) continue;
      if (k == "pattern" && v.is_string() && types.size() == 1 && types[0] == "string") {
        with_pattern = true;
        continue;
      }
      return std::nullopt;
    }
    for (const std::string& t : types) {
      if (t == "integer") return std::nullopt;  // "number but not integer" is not said here
      if (with_pattern)
        patterns[t].push_back(b["pattern"].get<std::string>());
      else
        whole[t] = true;
    }
  }
  Json rest_types = Json::array();
  Json out = Json::array();
  if (closed && !whole.count("object")) {
    // Objects a closed object schema {K: S_k} rejects: a key k of K present
    // with a value outside S_k, or a key outside K: for each set P of K's
    // keys present (the others absent), more than |P| keys.
    std::vector<std::string> keys;
    if (closed->contains("properties"))
      for (auto& [k, v] : (*closed)["properties"].items()) keys.push_back(k);
    for (const std::string& k : keys) {
      const std::optional<Json> outside = complement_schema((*closed)["properties"][k], ptr);
      if (!outside) return std::nullopt;
      if (*outside != Json(false))
        out.push_back(Json{{"type", "object"}, {"required", Json::array({k})}, {"properties", Json{{k, *outside}}}});
    }
    for (uint32_t present = 0; present < (1u << keys.size()); ++present) {
      Json shape = Json{{"type", "object"}, {"required", Json::array()}, {"properties", Json::object()}};
      for (size_t i = 0; i < keys.size(); ++i) {
        if (present >> i & 1)
          shape["required"].push_back(keys[i]);
        else
          shape["properties"][keys[i]] = false;
      }
      shape["minProperties"] = shape["required"].size() + 1;
      out.push_back(std::move(shape));
    }
    whole["object"] = true;  // said above
  }
  for (const char* t : {"null", "boolean", "object", "array", "number", "string"}) {
    if (whole.count(t)) continue;
    if (!patterns.count(t)) {
      rest_types.push_back(t);
      continue;
    }
    std::string joined;
    for (const std::string& p : patterns[t]) joined += (joined.empty() ? "" : "|") + ("(?:" + p + ")");
    out.push_back(Json{{"type", t}, {"not", Json{{"pattern", joined}}}});
  }
  if (!rest_types.empty()) out.push_back(Json{{"type", rest_types}});
  if (out.empty()) return Json(false);
  return out.size() == 1 ? out[0] : Json{{"anyOf", out}};
}

std::optional<std::vector<Json>> SchemaConverter::one_of_required_shapes(const Json& s, const std::string& ptr) {
  constexpr size_t kMaxKeys = 10;    // 2^10 presence patterns looked at
  constexpr size_t kMaxShapes = 16;  // as for the other case splits
  const Json& alts = s["oneOf"];
  if (!alts.is_array() || alts.size() < 2) return std::nullopt;
  // The schema around: an object schema (its other keywords stay in every
  // shape: each shape is the schema and one presence pattern).
  for (auto& [k, v] : s.items())
    if (k == "anyOf" || k == "allOf" || k == "$ref" || k == "const" || k == "enum") return std::nullopt;
  if (s.contains("type") && s["type"] != Json("object")) return std::nullopt;
  const bool objects_only = std::all_of(alts.begin(), alts.end(), [](const Json& b) {
    return b.is_object() && b.contains("type") && b["type"] == Json("object");
  });
  if (!s.contains("type") && !s.contains("properties") && !s.contains("required") &&
      !s.contains("additionalProperties") && !objects_only)
    return std::nullopt;
  if (s.contains("properties") && !s["properties"].is_object()) return std::nullopt;
  PresenceAtoms atoms;  // U, in first-seen order, and the value atoms
  for (const Json& alt : alts)
    if (!presence_keys(s, alt, atoms, ptr, 0)) return std::nullopt;
  const std::vector<std::string>& keys = atoms.keys;
  if (keys.size() + atoms.values.size() > kMaxKeys) return std::nullopt;
  // A value atom's "does not match" side needs the complement of its schema.
  std::vector<Json> complements;
  for (const auto& [key, value] : atoms.values) {
    const std::optional<Json> c = complement_schema(value, ptr);
    if (!c) return std::nullopt;
    complements.push_back(*c);
  }
  std::vector<std::string> outer_required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) return std::nullopt;
    for (const Json& r : s["required"]) {
      if (!r.is_string()) return std::nullopt;
      outer_required.push_back(r.get<std::string>());
    }
  }
  Json base = s;
  base.erase("oneOf");
  base["type"] = "object";
  // The forbidden keys are declared in the shapes; an object that declared
  // none stays open in strict mode too ({"type": "object"} alone is any object).
  if ((!s.contains("properties") || s["properties"].empty()) && !s.contains("additionalProperties"))
    base["additionalProperties"] = true;
  std::vector<Json> shapes;
  for (uint32_t present = 0; present < (1u << (keys.size() + atoms.values.size())); ++present) {
    bool meaningful = true;  // a value atom of an absent key is left 0 (one shape, not two)
    for (size_t a = 0; a < atoms.values.size(); ++a) {
      const size_t k = static_cast<size_t>(std::find(keys.begin(), keys.end(), atoms.values[a].first) - keys.begin());
      if ((present >> (keys.size() + a) & 1) != 0 && (present >> k & 1) == 0) meaningful = false;
    }
    if (!meaningful) continue;
    int matched = 0;
    for (const Json& alt : alts) matched += presence_holds(alt, atoms, present);
    if (matched != 1) continue;
    bool possible = true;
    Json shape = base;
    if (!shape.contains("required")) shape["required"] = Json::array();
    if (!shape.contains("properties")) shape["properties"] = Json::object();
    for (size_t k = 0; k < keys.size(); ++k) {
      const bool outer = std::find(outer_required.begin(), outer_required.end(), keys[k]) != outer_required.end();
      if (present >> k & 1) {
        if (!outer) shape["required"].push_back(keys[k]);
      } else if (outer) {
        possible = false;  // S requires a key this shape forbids
      } else {
        shape["properties"][keys[k]] = false;
      }
    }
    for (size_t a = 0; a < atoms.values.size() && possible; ++a) {
      const auto& [key, value] = atoms.values[a];
      const size_t k = static_cast<size_t>(std::find(keys.begin(), keys.end(), key) - keys.begin());
      if ((present >> k & 1) == 0) continue;
      const Json declared = shape["properties"].contains(key)        ? shape["properties"][key]
                            : shape.contains("additionalProperties") ? shape["additionalProperties"]
                                                                     : Json(true);
      shape["properties"][key] =
          both_values(declared, (present >> (keys.size() + a) & 1) != 0 ? value : complements[a], ptr);
      possible = shape["properties"][key] != Json(false);
    }
    if (!possible || object_impossible(shape)) continue;
    shapes.push_back(std::move(shape));
  }
  if (shapes.size() > kMaxShapes) return std::nullopt;
  if (shapes.empty()) unsupported("oneOf", ptr, "no object has exactly one branch's required keys: nothing is valid");
  return shapes;
}

}  // namespace brioche::grammar::schema

namespace brioche::grammar::schema {

// Closed objects (additionalProperties false, no required, nothing but
// type/properties): a document of branch i matches branch j exactly when
// its keys all lie in K_j (a shared property has one schema in both), so it
// matches no other branch exactly when, for every j, it has a key of
// K_i \ K_j. When one of those sets is inside all the others (D), that is
// "some key of D present": minProperties 1 when D = K_i, else a union of
// "k required" for k in D. An empty K_i \ K_j leaves branch i nothing
// (every object of it matches j too), and {} matches them all.
std::optional<std::vector<std::pair<size_t, Json>>> SchemaConverter::exclusive_closed_objects(
    const std::vector<std::pair<size_t, Json>>& branches, const std::string& ptr) {
  constexpr size_t kMaxKeyShapes = 8;
  struct Closed {
    size_t at;  // index into branches
    const Json* schema;
    std::set<std::string> keys;
  };
  std::vector<Closed> closed;
  std::vector<size_t> others;
  for (size_t i = 0; i < branches.size(); ++i) {
    const Json& b = branches[i].second;
    const Json* target = &b;
    if (b.is_object() && b.contains("$ref")) {
      for (auto& [k, v] : b.items())
        if (k != "$ref" && !is_annotation(k)) target = nullptr;
      if (target) target = &follow_refs(b, ptr);
    }
    bool is_closed = target && target->is_object() && target->contains("type") && (*target)["type"] == "object" &&
                     target->contains("additionalProperties") && (*target)["additionalProperties"] == Json(false) &&
                     (!target->contains("properties") || (*target)["properties"].is_object());
    if (is_closed)
      for (auto& [k, v] : target->items())
        if (k != "type" && k != "properties" && k != "additionalProperties" && !is_annotation(k)) is_closed = false;
    if (!is_closed) {
      others.push_back(i);
      continue;
    }
    Closed c{i, target, {}};
    if (target->contains("properties"))
      for (auto& [k, v] : (*target)["properties"].items()) c.keys.insert(k);
    closed.push_back(std::move(c));
  }
  if (closed.size() < 2) return std::nullopt;
  for (size_t a = 0; a < closed.size(); ++a)
    for (size_t b = a + 1; b < closed.size(); ++b)
      for (const std::string& k : closed[a].keys)
        if (closed[b].keys.count(k) && (*closed[a].schema)["properties"][k] != (*closed[b].schema)["properties"][k])
          return std::nullopt;
  for (size_t o : others)
    for (size_t j = 0; j < branches.size(); ++j)
      if (j != o && !provably_disjoint(branches[o].second, branches[j].second, ptr, 0)) return std::nullopt;
  std::vector<std::pair<size_t, Json>> out;
  for (size_t o : others) out.push_back(branches[o]);
  for (const Closed& c : closed) {
    std::vector<std::set<std::string>> lacking;  // K_i \ K_j for each other closed branch j
    bool none_left = false;
    for (const Closed& other : closed) {
      if (&other == &c) continue;
      std::set<std::string> d;
      for (const std::string& k : c.keys)
        if (!other.keys.count(k)) d.insert(k);
      none_left = none_left || d.empty();
      lacking.push_back(std::move(d));
    }
    if (none_left) continue;
    const std::set<std::string>& least = *std::min_element(
        lacking.begin(), lacking.end(), [](const auto& x, const auto& y) { return x.size() < y.size(); });
    for (const auto& d : lacking)
      if (!std::includes(d.begin(), d.end(), least.begin(), least.end())) return std::nullopt;
    Json shape = *c.schema;
    if (least == c.keys) {
      shape["minProperties"] = 1;
    } else {
      if (least.size() > kMaxKeyShapes) return std::nullopt;
      Json cases = Json::array();
      for (const std::string& k : least) {
        Json one = shape;
        one["required"] = Json::array({k});
        cases.push_back(std::move(one));
      }
      shape = cases.size() == 1 ? cases[0] : Json{{"anyOf", cases}};
    }
    out.emplace_back(branches[c.at].first, std::move(shape));
  }
  if (out.empty()) unsupported("oneOf", ptr, "every object its branches admit matches two of them: nothing is valid");
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  return out;
}

}  // namespace brioche::grammar::schema

namespace brioche::grammar::schema {

// A branch that is only a oneOf (itself or through $refs) whose own
// branches are proven pairwise disjoint stands for its branches: with
// X and Y disjoint, "exactly one of (exactly one of X, Y) and Z" is
// "exactly one of X, Y, Z" (the two differ only on documents in X, Y and Z
// at once). Spliced in, the branches can be told apart from the outer ones
// by the rules above (Travis' env: oneOf [envVars, {global, matrix}],
// envVars a oneOf of a string, a closed object and an array).
std::vector<std::pair<size_t, Json>> SchemaConverter::flatten_one_of(const std::vector<Json>& branches,
                                                                     const std::string& ptr, int depth) {
  std::vector<std::pair<size_t, Json>> out;
  for (size_t at = 0; at < branches.size(); ++at) {
    const Json& b = branches[at];
    const Json* inner = &b;
    bool only = b.is_object();
    if (only)
      for (auto& [k, v] : b.items()) only = only && (k == "$ref" || k == "oneOf" || is_annotation(k));
    if (only && b.contains("$ref")) {
      only = !b.contains("oneOf");
      inner = &follow_refs(b, ptr);
      if (only && inner->is_object())
        for (auto& [k, v] : inner->items()) only = only && (k == "oneOf" || is_annotation(k));
    }
    only = only && depth < kMaxDisjointDepth && inner->is_object() && inner->contains("oneOf") &&
           (*inner)["oneOf"].is_array() && !(*inner)["oneOf"].empty();
    if (only) {
      const Json& alts = (*inner)["oneOf"];
      for (size_t i = 0; i < alts.size() && only; ++i)
        for (size_t j = i + 1; j < alts.size() && only; ++j) only = provably_disjoint(alts[i], alts[j], ptr, 0);
    }
    if (!only) {
      out.emplace_back(at, b);
      continue;
    }
    for (auto& [inner_at, alt] :
         flatten_one_of(std::vector<Json>((*inner)["oneOf"].begin(), (*inner)["oneOf"].end()), ptr, depth + 1))
      out.emplace_back(at, std::move(alt));
  }
  return out;
}

}  // namespace brioche::grammar::schema
