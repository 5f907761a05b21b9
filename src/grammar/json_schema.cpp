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
#include <functional>
#include <limits>
#include <optional>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_limits.h"
#include "grammar/grammar.h"
#include "grammar/schema_formats.h"
#include "grammar/utf8.h"

namespace brioche::grammar {
namespace {

using Json = nlohmann::ordered_json;

// The EBNF of one schema grows linearly with it, except where keywords
// multiply rules (min/maxProperties: one rule per member and count); this
// bounds the text, and with it the conversion's time and memory.
constexpr size_t kMaxSchemaEbnfBytes = 16u << 20;
// Keys longer than this are clipped in JSON pointers (messages only) and
// rule-name hints, so a deep schema with long keys does not build strings
// of depth x key length at every level.
constexpr size_t kMaxNameChars = 64;

// Keywords that describe but do not constrain; skipped silently.
// Validation keywords of JSON Schema (drafts 4 to 2020-12) that constrain
// documents and that the converter does not enforce: a schema using one is
// refused rather than answered with documents that may break it.
const std::set<std::string> kConstrainingUnsupported = {
    "if", "then", "else", "dependencies", "dependentRequired", "dependentSchemas", "contains",
    "minContains", "maxContains", "uniqueItems", "additionalItems", "unevaluatedProperties", "unevaluatedItems",
    "$dynamicRef", "$recursiveRef"};

// Keywords the converter handles (per type, checked in visit_*).
// Every other keyword is an annotation (JSON Schema: unknown keywords are
// annotations): title, description, examples, draft-04's id, vendor
// extensions such as x-kubernetes-*, hyper-schema's links, and misspelled or
// private keys constrain nothing, and are ignored.
const std::set<std::string> kHandled = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf", "oneOf", "allOf",
    "$ref", "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "nullable", "minProperties", "maxProperties",
    "patternProperties", "propertyNames", "multipleOf", "not"};

bool is_annotation(const std::string& keyword) {
  return !kHandled.count(keyword) && !kConstrainingUnsupported.count(keyword);
}

std::string pointer_child(const std::string& ptr, const std::string& key) {
  std::string k;
  for (char c : key.size() <= kMaxNameChars ? key : key.substr(0, kMaxNameChars - 3) + "...") {
    if (c == '~') k += "~0";
    else if (c == '/') k += "~1";
    else k += c;
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

class SchemaConverter {
 public:
  SchemaConverter(const Json& root, const SchemaOptions& opt) : root_(root), opt_(opt) {
    if (opt_.any_whitespace)
      ws_ = opt_.max_whitespace > 0 ? "[ \\n\\r\\t]{0," + std::to_string(opt_.max_whitespace) + "}" : "[ \\n\\r\\t]*";
  }

  std::string convert() {
    try {
      return convert_unchecked();
    } catch (const nlohmann::json::exception& e) {
      // A keyword of the wrong JSON type (e.g. "$ref": 5) read with get<>().
      fail("JSON schema: at ", where_.empty() ? "#" : "#" + where_, ": a keyword has the wrong JSON type (",
           e.what(), ")");
    }
  }

 private:
  std::string convert_unchecked() {
    std::string body = visit(root_, "", "root");
    std::string out = "root ::= " + body + "\n";
    for (auto& [name, text] : rules_) out += name + " ::= " + text + "\n";
    return out;
  }

  const Json& root_;
  SchemaOptions opt_;
  std::string ws_;  // empty when !any_whitespace
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_{"root"};
  std::map<std::string, std::string> ref_rules_;  // JSON pointer -> rule name
  std::set<std::string> basics_;
  std::string key_rest_;    // rule name of an excluded key's free rest, once made
  std::string value_rest_;  // the same for an excluded value
  std::map<std::string, int> next_suffix_;  // per name base: the next _N to try in fresh()
  size_t ebnf_bytes_ = 0;  // rule text so far (bounded by kMaxSchemaEbnfBytes)
  int depth_ = 0;          // visit() calls open: nesting plus $ref hops
  std::string where_;      // pointer of the innermost open visit (for type errors)

  [[noreturn]] void unsupported(const std::string& keyword, const std::string& ptr, const std::string& why) {
    fail("JSON schema: unsupported '", keyword, "' at ", ptr.empty() ? "#" : "#" + ptr, ": ", why);
  }

  // A rule name not used yet: the hint, else hint_1, hint_2, ... (the next
  // suffix per base is remembered: many rules share a base, e.g. x_rest).
  std::string fresh(const std::string& hint) {
    std::string base = sanitize(hint), name = base;
    int& next = next_suffix_[base];
    if (next == 0) next = 1;
    else name = base + "_" + std::to_string(next++);
    while (names_.count(name)) name = base + "_" + std::to_string(next++);
    names_.insert(name);
    return name;
  }
  std::string add_rule(const std::string& hint, const std::string& body) {
    std::string name = fresh(hint);
    count_text(name.size() + body.size());
    rules_.emplace_back(name, body);
    return name;
  }
  void count_text(size_t bytes) {
    ebnf_bytes_ += bytes;
    if (ebnf_bytes_ > kMaxSchemaEbnfBytes)
      fail("JSON schema: its grammar grows past ", kMaxSchemaEbnfBytes >> 20, " MiB of EBNF (at ",
           where_.empty() ? "#" : "#" + where_, "); the limit is ", kMaxSchemaEbnfBytes >> 20,
           " MiB: simplify the schema (fewer properties under min/maxProperties, smaller enums)");
  }

  // Whitespace-aware separators.
  std::string ws() const { return ws_.empty() ? "" : " " + ws_ + " "; }
  std::string comma() const { return ws_.empty() ? "\", \"" : ws() + "\",\"" + ws(); }
  std::string colon() const { return ws_.empty() ? "\": \"" : ws() + "\":\"" + ws(); }
  std::string open(char c) const { return std::string("\"") + c + "\"" + ws(); }
  std::string close(char c) const { return ws() + "\"" + c + "\""; }

  // Shared building blocks, emitted once when first used.
  std::string basic(const std::string& name) {
    if (basics_.insert(name).second) {
      names_.insert(name);
      std::string body;
      if (name == "json_escape") body = "[\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9]{4}";
      else if (name == "json_char") body = "[^\"\\\\\\x00-\\x1f] | \"\\\\\" " + basic("json_escape");
      else if (name == "json_string")
        // The lookahead (what may follow a string: blanks then , } ] or :)
        // lets the compiler decide tokens that run past the closing quote.
        body = "\"\\\"\" (" + basic("json_char") + ")* \"\\\"\" " + string_lookahead();
      else if (name == "json_integer") body = "\"0\" | \"-\"? [1-9] [0-9]*";
      else if (name == "json_number")
        body = "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+\\-]? [0-9]+)?";
      else if (name == "json_boolean") body = "\"true\" | \"false\"";
      else if (name == "json_null") body = "\"null\"";
      else if (name == "json_value")
        body = basic("json_number") + " | " + basic("json_string") + " | " + basic("json_boolean") + " | " +
               basic("json_null") + " | " + basic("json_array") + " | " + basic("json_object");
      else if (name == "json_array")
        body = open('[') + basic("json_value") + " (" + comma() + basic("json_value") + ")*" + close(']') + " | " +
               open('[') + "\"]\"";
      else if (name == "json_object")
        body = open('{') + basic("json_string") + colon() + basic("json_value") + " (" + comma() +
               basic("json_string") + colon() + basic("json_value") + ")*" + close('}') + " | " + open('{') + "\"}\"";
      else fail("internal: unknown basic rule ", name);
      rules_.emplace_back(name, body);
    }
    return name;
  }

  static std::string literal(const Json& v) { return ebnf_quote(v.dump()); }

  // A JSON string rule whose content (between the quotes) is `content`. It
  // carries json_string's lookahead (a string is followed by blanks and one
  // of , } ] :), which keeps it a rule of its own: the compiler can decide
  // tokens that run past the closing quote, and the rule's masks are shared
  // by every grammar with the same content (e.g. a format).
  std::string string_rule(const std::string& hint, const std::string& content) {
    return add_rule(hint, "\"\\\"\" " + content + " \"\\\"\" " + string_lookahead());
  }
  std::string string_lookahead() const { return "(= " + (ws_.empty() ? "" : ws_ + " ") + "[,}\\]:])"; }

  const Json& resolve(const std::string& ref, const std::string& ptr) {
    if (ref.empty() || ref[0] != '#') unsupported("$ref", ptr, "only local references (#/...) are supported, got '" + ref + "'");
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

  std::string visit(const Json& s, const std::string& ptr, const std::string& hint_in) {
    VisitScope scope(*this, ptr);
    const std::string hint = hint_in.size() <= kMaxNameChars ? hint_in : hint_in.substr(0, kMaxNameChars);
    if (s.is_boolean()) {
      if (s.get<bool>()) return basic("json_value");
      unsupported("false", ptr, "the schema 'false' matches nothing");
    }
    if (!s.is_object()) unsupported("schema", ptr, "expected an object or boolean, found " + s.dump());
    for (auto& [k, v] : s.items())
      if (kConstrainingUnsupported.count(k) && !(k == "uniqueItems" && v == false))
        unsupported(k, ptr,
                    "a context-free grammar cannot enforce it here; expected only the keywords listed in "
                    "docs/grammar.md (remove it or rewrite the schema without it)");

    // Beside anyOf/oneOf, `not` goes down into every branch (merge_siblings).
    if (s.contains("not") && !s.contains("anyOf") && !s.contains("oneOf")) return visit_not(s, ptr, hint);
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
        std::string out;
        for (size_t i = 0; i < alts.size(); ++i)
          out += (i ? " | " : "") + visit(merge_siblings(s, alts[i], key), pointer_child(pointer_child(ptr, key), std::to_string(i)), hint + "_" + std::to_string(i));
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
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array()) for (auto& x : t) types.push_back(x.get<std::string>());
      else unsupported("type", ptr, "expected a string or an array of strings");
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
  int64_t count_of(const Json& s, const char* key, const std::string& ptr, int64_t fallback) {
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
  Json merge_siblings(const Json& parent, const Json& branch, const char* key) {
    if (!branch.is_object()) return branch;
    Json merged = branch;
    for (auto& [k, v] : parent.items())
      if (k != key && !is_annotation(k) && !merged.contains(k)) merged[k] = v;
    return merged;
  }

  // allOf of object-like schemas: properties and required are unioned, other
  // keywords must agree. Anything else is reported instead of being guessed.
  Json merge_all_of(const Json& s, const std::string& ptr) {
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
          unsupported("$ref", part_ptr, "a chain of more than " + std::to_string(kMaxSchemaDepth) +
                                            " $refs (or a cycle of them) inside allOf; the limit is " +
                                            std::to_string(kMaxSchemaDepth));
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

  // ---- not -------------------------------------------------------------------

  // `not` where a grammar can say it exactly, by rewriting the schema
  // without it:
  //   not {type: T}          the sibling's types (all six when none) minus T
  //                          (number takes integer with it; "number but not
  //                          integer" is refused);
  //   not {enum|const: ...}  next to an enum/const: those values dropped;
  //                          next to a plain {type: string}: any string but
  //                          those (excluded_value);
  // anything else (not {required}, not {pattern}, ...) is refused with the
  // pointer, as before.
  std::string visit_not(const Json& s, const std::string& ptr, const std::string& hint) {
    const std::string not_ptr = pointer_child(ptr, "not");
    const Json& n = s["not"];
    Json rest = s;
    rest.erase("not");
    auto refuse = [&](const std::string& why) {
      unsupported("not", ptr, why + "; expected not {type}, or not {enum/const} beside an enum, a const or a plain "
                  "string type");
    };
    if (!n.is_object()) refuse("found " + n.dump().substr(0, 80));
    if (rest.contains("$ref") || rest.contains("allOf")) refuse("not beside $ref or allOf");
    std::vector<std::string> keys;
    for (auto& [k, v] : n.items())
      if (!is_annotation(k)) keys.push_back(k);
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
          refuse("'number but not integer' is not a grammar this converter writes");
        if (std::find(excluded.begin(), excluded.end(), t) == excluded.end()) kept.push_back(t);
      }
      if (kept.empty()) unsupported("not", ptr, "no type is left: the schema matches nothing");
      if (rest.contains("const") || rest.contains("enum")) {  // the listed values of a type left
        Json values = Json::array();
        for (const Json& v : rest.contains("const") ? Json::array({rest["const"]}) : rest["enum"])
          if (std::any_of(kept.begin(), kept.end(), [&](const std::string& t) { return has_type(v, t); })) values.push_back(v);
        if (values.empty()) unsupported("not", ptr, "every allowed value has an excluded type: the schema matches nothing");
        rest.erase("const");
        rest["enum"] = values;
      }
      rest["type"] = kept.size() == 1 ? Json(kept[0]) : Json(kept);
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
          relevant = relevant || std::any_of(types.begin(), types.end(), [&](const std::string& t) { return has_type(v, t); });
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
      refuse("not {" + keys[0] + "} is enforced only beside an enum, a const or a plain {\"type\": \"string\"}");
    }
    refuse(keys.empty() ? "an empty not matches nothing" : "not {" + keys[0] + (keys.size() > 1 ? ", ..." : "") + "}");
  }

  // Whether a JSON value is an instance of JSON Schema type `t`.
  static bool has_type(const Json& v, const std::string& t) {
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

  std::vector<std::string> type_list(const Json& t, const std::string& ptr) {
    std::vector<std::string> out;
    if (t.is_string()) out.push_back(t.get<std::string>());
    else if (t.is_array()) for (auto& x : t) out.push_back(x.get<std::string>());
    else unsupported("type", ptr, "expected a string or an array of strings");
    return out;
  }

  std::string visit_type(const Json& s, const std::string& type, const std::string& ptr, const std::string& hint) {
    if (type == "null") return basic("json_null");
    if (type == "boolean") return basic("json_boolean");
    if (type == "integer") return visit_integer(s, ptr, hint);
    if (type == "number") return visit_number(s, ptr, hint);
    if (type == "string") return visit_string(s, ptr, hint);
    if (type == "array") return visit_array(s, ptr, hint);
    if (type == "object") return visit_object(s, ptr, hint);
    unsupported("type", ptr, "unknown type '" + type + "'");
  }

  // ---- numbers -------------------------------------------------------------

  using Bound = NumberBound;
  Bound bound(const Json& s, const char* inclusive, const char* exclusive, const std::string& ptr) {
    Bound b;
    if (s.contains(inclusive)) {
      if (!s[inclusive].is_number()) unsupported(inclusive, ptr, "expected a number");
      b = Bound{true, s[inclusive].get<double>(), false};
    }
    if (s.contains(exclusive)) {
      const Json& e = s[exclusive];
      if (e.is_boolean()) {  // draft 4: a flag on minimum/maximum
        b.exclusive = e.get<bool>();
      } else if (e.is_number()) {
        double v = e.get<double>();
        if (!b.present || (std::string(exclusive) == "exclusiveMinimum" ? v >= b.value : v <= b.value))
          b = Bound{true, v, true};
      } else {
        unsupported(exclusive, ptr, "expected a number or boolean");
      }
    }
    return b;
  }

  // multipleOf as (k, p): the value times 10^p must be a multiple of the
  // integer k; only k = 1 (at most p fraction digits) or p = 0 are expressible.
  std::optional<int64_t> integer_multiple(const Json& s, const std::string& ptr, bool integer_type, int* decimals) {
    *decimals = 0;
    if (!s.contains("multipleOf")) return std::nullopt;
    const Json& m = s["multipleOf"];
    if (!m.is_number() || m.get<double>() <= 0) unsupported("multipleOf", ptr, "expected a positive number");
    if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum"))
      unsupported("multipleOf", ptr,
                  "expected multipleOf without minimum/maximum/exclusiveMinimum/exclusiveMaximum, found both "
                  "(a divisor and a range are each a grammar, their intersection is not one the compiler builds)");
    const double v = m.get<double>();
    if (v == std::floor(v)) {
      if (v > 1000)
        unsupported("multipleOf", ptr,
                    "expected an integer divisor of at most 1000 (the grammar has one rule per remainder), found " +
                        m.dump());
      return static_cast<int64_t>(v);
    }
    for (int p = 1; p <= 9 && !integer_type; ++p)
      if (std::fabs(v * std::pow(10.0, p) - 1.0) < 1e-9) {
        *decimals = p;
        return 1;
      }
    unsupported("multipleOf", ptr,
                (integer_type ? "expected an integer divisor for an integer, found "
                              : "expected an integer divisor or a power of ten (0.1, 0.01, ...), found ") +
                    m.dump());
  }

  // Canonical decimal integers (no leading zeros, no "-0") divisible by k:
  // a DFA over the value mod k, one rule per remainder.
  std::string multiple_of_integer(int64_t k, const std::string& hint) {
    if (k == 1) return basic("json_integer");
    std::vector<std::string> name(k);
    for (int64_t r = 0; r < k; ++r) name[r] = fresh(hint + "_mod" + std::to_string(k) + "_" + std::to_string(r));
    // Digits grouped by the remainder they lead to, as a class.
    auto steps = [&](int64_t r, int first_digit) {
      std::map<int64_t, std::string> by_next;
      for (int d = first_digit; d <= 9; ++d) by_next[(10 * r + d) % k] += static_cast<char>('0' + d);
      std::vector<std::string> alts;
      for (auto& [next, digits] : by_next) alts.push_back("[" + digits + "] " + name[next]);
      return alts;
    };
    for (int64_t r = 0; r < k; ++r) {
      std::vector<std::string> alts = steps(r, 0);
      if (r == 0) alts.insert(alts.begin(), "\"\"");
      std::string body;
      for (auto& a : alts) body += (body.empty() ? "" : " | ") + a;
      rules_.emplace_back(name[r], body);
    }
    std::string lead;
    for (auto& a : steps(0, 1)) lead += (lead.empty() ? "" : " | ") + a;
    return add_rule(hint + "_multiple", "\"0\" | \"-\"? (" + lead + ")");
  }

  std::string visit_integer(const Json& s, const std::string& ptr, const std::string& hint) {
    int decimals = 0;
    if (auto k = integer_multiple(s, ptr, /*integer_type=*/true, &decimals)) return multiple_of_integer(*k, hint);
    Bound lo = bound(s, "minimum", "exclusiveMinimum", ptr), hi = bound(s, "maximum", "exclusiveMaximum", ptr);
    if (!lo.present && !hi.present) return basic("json_integer");
    constexpr double kLimit = 9e15;
    std::optional<int64_t> a, b;
    if (lo.present) {
      if (std::fabs(lo.value) > kLimit) unsupported("minimum", ptr, "bound beyond +-9e15");
      double v = lo.exclusive ? std::floor(lo.value) + 1 : std::ceil(lo.value);
      a = static_cast<int64_t>(v);
    }
    if (hi.present) {
      if (std::fabs(hi.value) > kLimit) unsupported("maximum", ptr, "bound beyond +-9e15");
      double v = hi.exclusive ? std::ceil(hi.value) - 1 : std::floor(hi.value);
      b = static_cast<int64_t>(v);
    }
    if (a && b && *a > *b) unsupported("minimum", ptr, "minimum is greater than maximum: no integer fits");
    return add_rule(hint + "_int", integer_range(a, b));
  }

  std::string visit_number(const Json& s, const std::string& ptr, const std::string& hint) {
    int decimals = 0;
    if (auto k = integer_multiple(s, ptr, /*integer_type=*/false, &decimals)) {
      // No exponent form (like the bounded numbers): the value is written out.
      if (decimals == 0) return add_rule(hint + "_num", multiple_of_integer(*k, hint) + " (\".\" \"0\"+)?");
      return add_rule(hint + "_num", "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]{1," + std::to_string(decimals) + "} \"0\"*)?");
    }
    Bound lo = bound(s, "minimum", "exclusiveMinimum", ptr), hi = bound(s, "maximum", "exclusiveMaximum", ptr);
    if (!lo.present && !hi.present) return basic("json_number");
    for (const Bound* b : {&lo, &hi})
      if (b->present && std::fabs(b->value) > 9e15)
        unsupported(b == &lo ? "minimum" : "maximum", ptr, "bound beyond +-9e15");
    if ((lo.present && lo.value != std::floor(lo.value)) || (hi.present && hi.value != std::floor(hi.value))) {
      // Fractional bounds: a DFA over the number's text, one rule per state.
      if (lo.present && hi.present && (lo.value > hi.value || (lo.value == hi.value && (lo.exclusive || hi.exclusive))))
        unsupported("minimum", ptr, "the range is empty");
      DecimalBound dlo, dhi;
      if (lo.present) dlo = decimal_bound(lo.value, lo.exclusive);
      if (hi.present) dhi = decimal_bound(hi.value, hi.exclusive);
      std::vector<std::string> bodies = decimal_range_rules(dlo, dhi);
      std::vector<std::string> names;
      for (size_t i = 0; i < bodies.size(); ++i) names.push_back(fresh(hint + "_dec"));
      for (size_t i = 0; i < bodies.size(); ++i) {
        std::string body;
        for (size_t pos = 0; pos < bodies[i].size();) {
          size_t open_at = bodies[i].find("{R", pos);
          if (open_at == std::string::npos) {
            body += bodies[i].substr(pos);
            break;
          }
          size_t close_at = bodies[i].find('}', open_at);
          body += bodies[i].substr(pos, open_at - pos) + names[std::stoul(bodies[i].substr(open_at + 2, close_at - open_at - 2))];
          pos = close_at + 1;
        }
        rules_.emplace_back(names[i], body);
      }
      return names[0];
    }
    if (lo.present && hi.present && (lo.value > hi.value || (lo.value == hi.value && (lo.exclusive || hi.exclusive))))
      unsupported("minimum", ptr, "the range is empty");
    return add_rule(hint + "_num", number_range(lo, hi));
  }

  // ---- strings -------------------------------------------------------------

  // pattern + minLength/maxLength, exact when the pattern is one repeated
  // atom (a class, an escape like \d, '.', or a literal character:
  // `^[a-z]+$`, `\d{3,}`): each repetition is one character, so the length
  // bounds intersect the repetition bounds. Other patterns: a named error.
  // JSON Schema's `pattern` is an ECMA-262 search, not a full match: an end
  // the pattern does not anchor (^, $) may hold any characters. (^https?://
  // admits "https://example.com", not only the prefix itself.) The
  // length-bounded form above keeps full-match semantics, and so does a
  // top-level alternation anchored at one end only (^a|b): both admit a
  // subset of the valid strings, never an invalid one.
  static std::string search_pattern(const std::string& p) {
    const bool at_start = !p.empty() && p.front() == '^';
    size_t backslashes = 0;  // before the last character: an odd run makes a final '$' a literal
    while (backslashes + 1 < p.size() && p[p.size() - 2 - backslashes] == '\\') ++backslashes;
    const bool at_end = p.size() > (at_start ? 1u : 0u) && p.back() == '$' && backslashes % 2 == 0;
    if (at_start && at_end) return p;
    std::string body = p.substr(at_start ? 1 : 0, p.size() - (at_start ? 1 : 0) - (at_end ? 1 : 0));
    return std::string("^") + (at_start ? "" : "[\\s\\S]*") + "(?:" + body + ")" + (at_end ? "" : "[\\s\\S]*") + "$";
  }

  std::string length_bounded_pattern(const std::string& pattern, int64_t lo, int64_t hi, const std::string& ptr) {
    auto fail_combination = [&] {
      unsupported(hi >= 0 ? "maxLength" : "minLength", ptr,
                  "pattern combined with minLength/maxLength is implemented only for one repeated class or character "
                  "(like ^[a-z0-9_]+$); found '" + pattern + "'");
    };
    std::string p = pattern;
    if (!p.empty() && p.front() == '^') p.erase(0, 1);
    if (p.size() >= 2 && p.back() == '$' && p[p.size() - 2] != '\\') p.pop_back();
    if (p.empty()) fail_combination();
    size_t end = 0;  // one past the atom
    if (p[0] == '[') {
      size_t i = 1;
      if (i < p.size() && p[i] == '^') ++i;
      if (i < p.size() && p[i] == ']') fail_combination();
      for (; i < p.size() && p[i] != ']'; ++i) {
        if (p[i] == '[') fail_combination();
        if (p[i] == '\\') ++i;
      }
      if (i >= p.size()) fail_combination();
      end = i + 1;
    } else if (p[0] == '\\') {
      if (p.size() < 2 || std::string("dDwWsS.-\\/[](){}*+?^$|").find(p[1]) == std::string::npos) fail_combination();
      end = 2;
    } else if (std::string("()|*+?{").find(p[0]) != std::string::npos) {
      fail_combination();
    } else {
      uint32_t cp;
      end = decode_utf8(p, 0, &cp);
      if (end == 0) fail_combination();
    }
    const std::string atom = p.substr(0, end), quant = p.substr(end);
    int64_t a = 1, b = 1;  // repetitions of the atom, b < 0: unbounded
    if (quant == "*") a = 0, b = -1;
    else if (quant == "+") a = 1, b = -1;
    else if (quant == "?") a = 0, b = 1;
    else if (!quant.empty()) {
      if (quant.front() != '{' || quant.back() != '}') fail_combination();
      const std::string inner = quant.substr(1, quant.size() - 2);
      const size_t comma = inner.find(',');
      auto number = [&](const std::string& t) -> int64_t {
        if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos) fail_combination();
        return std::stoll(t);
      };
      a = number(comma == std::string::npos ? inner : inner.substr(0, comma));
      b = comma == std::string::npos ? a : comma + 1 == inner.size() ? -1 : number(inner.substr(comma + 1));
    }
    const int64_t from = std::max(a, lo);
    const int64_t to = b < 0 ? hi : hi < 0 ? b : std::min(b, hi);
    if (to >= 0 && to < from)
      unsupported(hi >= 0 ? "maxLength" : "minLength", ptr,
                  "no string matches pattern '" + pattern + "' within the length bounds");
    if (from > 10000 || to > 10000) unsupported("maxLength", ptr, "length bounds above 10000");
    return "^" + atom + "{" + std::to_string(from) + "," + (to >= 0 ? std::to_string(to) : "") + "}$";
  }

  std::string visit_string(const Json& s, const std::string& ptr, const std::string& hint) {
    if (s.contains("format")) {
      std::string f = s["format"].get<std::string>();
      std::string body = format_ebnf(f);
      if (body.empty())
        unsupported("format", ptr, "expected one of " + supported_formats() + ", found '" + f + "'");
      if (s.contains("pattern")) unsupported("pattern", ptr, "expected either format or pattern on one string, found both");
      if (s.contains("minLength") || s.contains("maxLength")) {
        // Exact only for formats of one fixed length: the bounds either
        // admit it (and add nothing) or admit no string.
        const int64_t fixed = f == "uuid" ? 36 : f == "date" ? 10 : -1;
        const char* which = s.contains("maxLength") ? "maxLength" : "minLength";
        if (fixed < 0)
          unsupported(which, ptr, "format '" + f + "' combined with minLength/maxLength (its strings vary in length)");
        if (count_of(s, "minLength", ptr, 0) > fixed || (s.contains("maxLength") && count_of(s, "maxLength", ptr, 0) < fixed))
          unsupported(which, ptr, "format '" + f + "' strings have " + std::to_string(fixed) + " characters; none fits");
      }
      return string_rule(hint + "_" + sanitize(f), "(" + body + ")");
    }
    if (s.contains("pattern")) {
      std::string pattern = s["pattern"].get<std::string>();
      if (s.contains("minLength") || s.contains("maxLength")) {
        int64_t lo = count_of(s, "minLength", ptr, 0), hi = count_of(s, "maxLength", ptr, -1);
        if (lo < 0 || (hi >= 0 && hi < lo)) unsupported("minLength", ptr, "expected 0 <= minLength <= maxLength");
        pattern = length_bounded_pattern(pattern, lo, hi, ptr);
      } else {
        pattern = search_pattern(pattern);
      }
      std::string body;
      try {
        body = regex_to_ebnf_expr(pattern, /*inside_json_string=*/true);
      } catch (const Error& e) {
        unsupported("pattern", ptr, e.what());
      }
      return string_rule(hint + "_pattern", body);
    }
    if (s.contains("minLength") || s.contains("maxLength")) {
      int64_t lo = count_of(s, "minLength", ptr, 0), hi = count_of(s, "maxLength", ptr, -1);
      if (lo < 0 || (hi >= 0 && hi < lo)) unsupported("minLength", ptr, "expected 0 <= minLength <= maxLength");
      if (lo > 10000 || hi > 10000) unsupported("maxLength", ptr, "length bounds above 10000");
      std::string rep = "{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "}";
      return string_rule(hint + "_str", "(" + basic("json_char") + ")" + rep);
    }
    return basic("json_string");
  }

  // ---- arrays --------------------------------------------------------------

  std::string visit_array(const Json& s, const std::string& ptr, const std::string& hint) {
    int64_t min_items = count_of(s, "minItems", ptr, 0);
    int64_t max_items = count_of(s, "maxItems", ptr, -1);
    if (min_items < 0 || (max_items >= 0 && max_items < min_items))
      unsupported("minItems", ptr, "expected 0 <= minItems <= maxItems");
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      const Json& p = s["prefixItems"];
      if (!p.is_array()) unsupported("prefixItems", ptr, "expected an array");
      for (size_t i = 0; i < p.size(); ++i)
        prefix.push_back(visit(p[i], pointer_child(pointer_child(ptr, "prefixItems"), std::to_string(i)), hint + "_item" + std::to_string(i)));
    }
    // Item schema after the prefix: none (closed), a schema, or any value.
    std::string rest;
    bool closed = false;
    if (s.contains("items")) {
      const Json& it = s["items"];
      if (it.is_boolean() && !it.get<bool>()) closed = true;
      else rest = visit(it, pointer_child(ptr, "items"), hint + "_item");
    } else if (!prefix.empty() && opt_.strict) {
      closed = true;
    } else if (prefix.empty() && min_items == 0 && max_items < 0) {
      return basic("json_array");
    } else {
      rest = basic("json_value");
    }
    int64_t k = static_cast<int64_t>(prefix.size());
    if (closed) {
      if (min_items > k) unsupported("minItems", ptr, "minItems exceeds the number of prefixItems of a closed array");
      if (max_items < 0 || max_items > k) max_items = k;
    }
    if (max_items == 0) return add_rule(hint + "_arr", open('[') + "\"]\"");
    // Items 1..n: item i is prefix[i-1] or rest. Mandatory up to min_items.
    auto item = [&](int64_t i) { return i <= k ? prefix[i - 1] : rest; };
    // tail(i): items i.. (item i not yet emitted; at least one emitted before).
    // Built from the last prefix item backwards in a loop (there may be
    // thousands); a mandatory item's tail is a plain sequence, an optional
    // one a rule "" | more.
    auto tail_past_prefix = [&](int64_t i) -> std::string {
      if (max_items >= 0 && i > max_items) return "\"\"";
      // Homogeneous rest: between max(min_items - i + 1, 0) and max - i + 1 more.
      int64_t need = std::max<int64_t>(min_items - i + 1, 0);
      std::string rep = max_items >= 0 ? "{" + std::to_string(need) + "," + std::to_string(max_items - i + 1) + "}"
                                       : "{" + std::to_string(need) + ",}";
      return "(" + comma() + rest + ")" + rep;
    };
    std::string tail = tail_past_prefix(k + 1);  // tail(i) for i = k + 1, then downwards
    for (int64_t i = k; i >= 2; --i) {
      if (max_items >= 0 && i > max_items) {
        tail = "\"\"";
        continue;
      }
      std::string more = comma() + item(i) + " " + tail;
      tail = i <= min_items ? more : add_rule(hint + "_tail", "\"\" | " + more);
    }
    if (k < 2) tail = tail_past_prefix(2);
    std::string first = item(1) + " " + tail;
    std::string body;
    if (min_items > 0) {
      body = open('[') + first + close(']');
    } else if (k > 0) {
      // xgrammar's shape for prefixItems: whitespace on both sides of an
      // optional body (with bounded runs, "[" + 2N blanks + "]" is allowed).
      body = open('[') + "(\"\" | " + first + ")" + close(']');
    } else {
      body = open('[') + first + close(']') + " | " + open('[') + "\"]\"";
    }
    return add_rule(hint + "_arr", body);
  }

  // ---- objects -------------------------------------------------------------

  std::string visit_object(const Json& s, const std::string& ptr, const std::string& hint) {
    std::vector<std::pair<std::string, std::string>> props;  // raw key text, value expr
    std::set<std::string> required;
    std::vector<std::string> required_order;  // undeclared required keys come in this order
    if (s.contains("required")) {
      for (auto& r : s["required"])
        if (required.insert(r.get<std::string>()).second) required_order.push_back(r.get<std::string>());
    }
    bool has_props = s.contains("properties") && !s["properties"].empty();
    if (s.contains("properties")) {
      for (auto& [k, v] : s["properties"].items())
        props.emplace_back(k, visit(v, pointer_child(pointer_child(ptr, "properties"), k), hint + "_" + k));
    }
    for (const std::string& r : required_order) {
      bool found = false;
      for (auto& p : props) found |= p.first == r;
      if (!found) props.emplace_back(r, basic("json_value"));  // required but undeclared: any value
    }
    int64_t min_props = 0, max_props = -1;
    min_props = count_of(s, "minProperties", ptr, 0);
    max_props = count_of(s, "maxProperties", ptr, -1);
    if (max_props >= 0 && max_props < min_props) unsupported("minProperties", ptr, "minProperties exceeds maxProperties");
    if (min_props > 64 || max_props > 64)
      unsupported(min_props > 64 ? "minProperties" : "maxProperties", ptr,
                  "expected a bound of at most 64 (the grammar counts members, one rule per count), found " +
                      std::to_string(std::max(min_props, max_props)));
    const bool counted = min_props > 0 || max_props >= 0;
    // Additional properties: none, a schema, or anything; their key is any
    // other string, or what propertyNames / patternProperties allow.
    std::string addl;      // value expr; empty = not allowed
    std::string addl_key;  // key expr; empty = any key that differs from the declared ones
    if (s.contains("patternProperties")) {
      const Json& pp = s["patternProperties"];
      const std::string pp_ptr = pointer_child(ptr, "patternProperties");
      if (!pp.is_object()) unsupported("patternProperties", ptr, "expected an object");
      if (pp.size() != 1)
        unsupported("patternProperties", ptr,
                    "only one pattern is implemented (a key matching several patterns must satisfy all their schemas)");
      if (has_props || !required.empty() || s.contains("propertyNames") ||
          (s.contains("additionalProperties") && s["additionalProperties"] != Json(false)))
        unsupported("patternProperties", ptr,
                    "combined with properties, required, propertyNames or additionalProperties other than false: "
                    "keys would need the complement of the pattern");
      auto [pattern, value_schema] = *pp.items().begin();
      addl_key = key_rule(hint, pattern, pp_ptr);
      addl = visit(value_schema, pointer_child(pp_ptr, pattern), hint + "_pp");
    } else if (s.contains("propertyNames")) {
      const std::string pn_ptr = pointer_child(ptr, "propertyNames");
      if (has_props || !required.empty())
        unsupported("propertyNames", ptr,
                    "combined with properties/required: declared keys are not checked against propertyNames");
      Json names = s["propertyNames"];
      if (!names.is_object()) unsupported("propertyNames", ptr, "expected a schema object");
      if (!names.contains("type")) names["type"] = "string";
      if (names["type"] != "string") unsupported("propertyNames", pn_ptr, "property names are strings: expected type string");
      addl_key = visit(names, pn_ptr, hint + "_name");
      if (s.contains("additionalProperties")) {
        const Json& a = s["additionalProperties"];
        if (a.is_boolean()) addl = a.get<bool>() ? basic("json_value") : "";
        else addl = visit(a, pointer_child(ptr, "additionalProperties"), hint + "_addl");
      } else {
        addl = basic("json_value");
      }
    } else if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      if (a.is_boolean()) addl = a.get<bool>() ? basic("json_value") : "";
      else addl = visit(a, pointer_child(ptr, "additionalProperties"), hint + "_addl");
    } else if (!has_props && required.empty() && !counted) {
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
        addl_key = add_rule(hint + "_addl_key", excluded_key(keys));
      }
      addl_kv = addl_key + colon() + addl;
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
            out = "(" + comma() + addl_kv + "){" + std::to_string(need) + "," + (room >= 0 ? std::to_string(room) : "") + "}";
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

  // A key (quotes included) whose content matches `pattern`.
  std::string key_rule(const std::string& hint, const std::string& pattern, const std::string& ptr) {
    std::string body;
    try {
      body = regex_to_ebnf_expr(pattern, /*inside_json_string=*/true);
    } catch (const Error& e) {
      unsupported("patternProperties", ptr, e.what());
    }
    return string_rule(hint + "_key", body);
  }

  // A JSON string token (quotes included) whose raw text differs from each
  // of `keys`: a trie over the keys' codepoints where leaving the trie is
  // free and ending on a full key is not.
  std::string excluded_key(const std::vector<std::string>& keys) {
    // The rest of a key once it differs from every declared key: its own
    // rule with a lookahead (a key is followed by blanks and ':'), shared by
    // every trie node (and, through the mask cache, by every grammar).
    if (key_rest_.empty())
      key_rest_ = add_rule("key_rest", "(" + basic("json_char") + ")* \"\\\"\" (= " + (ws_.empty() ? "" : ws_ + " ") + "\":\")");
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

  struct TrieNode {
    std::map<uint32_t, int> kids;  // codepoint -> node
    bool terminal = false;         // a whole text ends here
  };

  // A trie over the codepoints of `texts`, and one rule per node named by
  // node_rule(node, rule names of the nodes so far), children first: post-
  // order with an explicit stack (a text may be thousands of characters
  // long, one trie level each). Returns the root's rule.
  template <class NodeRule>
  std::string trie_rules(const std::vector<std::string>& texts, NodeRule node_rule) {
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
        for (auto it = trie[node].kids.rbegin(); it != trie[node].kids.rend(); ++it) stack.emplace_back(it->second, false);
        continue;
      }
      rule_of[node] = node_rule(trie[node], rule_of);
    }
    return rule_of[0];
  }

  // A JSON string token whose decoded value differs from each of `values`:
  // a trie over the values' codepoints. Along it a character is read
  // literally or as its simple escape (\" \\ \/ \n ...), and either way
  // follows the trie; \uXXXX is not offered there (a value spelled that way
  // is refused, never an excluded value admitted). Leaving the trie is free;
  // closing the string on a whole excluded value is not.
  std::string excluded_value(const std::vector<std::string>& values) {
    if (value_rest_.empty()) value_rest_ = add_rule("value_rest", "(" + basic("json_char") + ")* \"\\\"\"");
    const std::pair<char, uint32_t> kEscapes[] = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},  {'b', '\b'},
                                                  {'f', '\f'}, {'n', '\n'},   {'r', '\r'}, {'t', '\t'}};
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
        alts.push_back(ebnf_quote(std::string("\\") + letter) + " " + (kid == nd.kids.end() ? value_rest_ : rule_of[kid->second]));
      }
      std::string body;
      for (auto& a : alts) body += (body.empty() ? "" : " | ") + a;
      return add_rule("value_excl", "(" + body + ")");
    });
  }
};

}  // namespace

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
