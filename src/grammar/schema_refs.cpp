// `$ref` resolution: JSON pointers from the root ("#/$defs/a"), plain-name
// fragments ("#node": a 2019-09+ `$anchor`, or a draft 4-7 `$id`/`id` of
// "#node"), and URIs that name the root or a subschema by its `$id`
// ("https://example.com/root.json#/definitions/a", "item.json"), relative
// ones against the root's `$id`. Nothing outside the schema is fetched.
// A subschema with an `$id` URI of its own is a resource of its own: a
// pointer inside it ("#/$defs/b") means its own definitions, not the
// root's, and is refused (refuse_nested_pointers) rather than misread.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "grammar/schema_converter.h"

namespace brioche::grammar::schema {
namespace {

// The URI without its fragment ("a.json#" and "a.json" name one resource).
std::string without_fragment(const std::string& uri) { return uri.substr(0, uri.find('#')); }

// A relative reference against an absolute base: "item.json" beside
// "https://x.io/s/root.json" is "https://x.io/s/item.json" (the common
// cases of RFC 3986 section 5: a path relative to the base's directory, or
// from its authority's root).
std::string against(const std::string& base, const std::string& ref) {
  if (ref.find("://") != std::string::npos || base.find("://") == std::string::npos) return ref;
  const size_t authority = base.find("://") + 3;
  if (!ref.empty() && ref[0] == '/') return base.substr(0, base.find('/', authority)) + ref;
  const size_t slash = base.rfind('/');
  return (slash == std::string::npos || slash < authority ? base + "/" : base.substr(0, slash + 1)) + ref;
}

}  // namespace

void SchemaConverter::index_ids(const Json& s, int depth) {
  if (depth > kMaxSchemaDepth) return;  // a deeper schema is refused by its visit
  if (s.is_array()) {
    for (const Json& item : s) index_ids(item, depth + 1);
    return;
  }
  if (!s.is_object()) return;
  auto name = [&](std::map<std::string, const Json*>& index, const std::string& key) {
    auto [it, fresh] = index.emplace(key, &s);
    if (!fresh && it->second != &s) it->second = nullptr;  // named twice: a $ref to it is refused
  };
  if (s.contains("$anchor") && s["$anchor"].is_string()) name(anchors_, "#" + s["$anchor"].get<std::string>());
  for (const char* key : {"$id", "id"}) {
    if (!s.contains(key) || !s[key].is_string()) continue;
    const std::string id = s[key].get<std::string>();
    if (!id.empty() && id[0] == '#') {
      name(anchors_, id);
    } else if (!id.empty() && key[0] == '$') {  // draft 4's `id` is also a common property name: only `$id` URIs
      name(ids_, without_fragment(id));
      const Json& root_id = root_.is_object() && root_.contains("$id") ? root_["$id"] : Json();
      if (root_id.is_string()) name(ids_, without_fragment(against(root_id.get<std::string>(), id)));
    }
  }
  for (const auto& [key, value] : s.items()) {
    // Data, not schemas: an "id" there names nothing.
    if (key == "enum" || key == "const" || key == "default" || key == "examples") continue;
    index_ids(value, depth + 1);
  }
}

void SchemaConverter::refuse_nested_pointers(const Json& s, const std::string& ptr, int depth,
                                             const std::string& resource) {
  if (depth > kMaxSchemaDepth) return;  // a deeper schema is refused by its visit
  if (s.is_array()) {
    for (size_t i = 0; i < s.size(); ++i)
      refuse_nested_pointers(s[i], pointer_child(ptr, std::to_string(i)), depth + 1, resource);
    return;
  }
  if (!s.is_object()) return;
  std::string inside = resource;
  if (depth > 0 && s.contains("$id") && s["$id"].is_string() && !s["$id"].get<std::string>().empty() &&
      s["$id"].get<std::string>()[0] != '#')
    inside = s["$id"].get<std::string>();
  if (!inside.empty() && s.contains("$ref") && s["$ref"].is_string()) {
    const std::string ref = s["$ref"].get<std::string>();
    if (ref.empty() || (ref[0] == '#' && (ref.size() == 1 || ref[1] == '/')))
      unsupported("$ref", ptr,
                  "'" + ref + "' inside the subschema with $id '" + inside +
                      "' is a pointer into that resource, which is read here only from the root (expected the "
                      "subschema's definitions at the root, or a reference that names the resource)");
  }
  for (const auto& [key, value] : s.items()) {
    if (key == "enum" || key == "const" || key == "default" || key == "examples") continue;
    refuse_nested_pointers(value, pointer_child(ptr, key), depth + 1, inside);
  }
}

const Json& SchemaConverter::resolve(const std::string& ref, const std::string& ptr) {
  if (ref.empty() || (ref[0] == '#' && (ref.size() == 1 || ref[1] == '/'))) return resolve_pointer(root_, ref, 1, ptr);
  if (!ids_indexed_) {
    index_ids(root_, 0);
    ids_indexed_ = true;
  }
  auto found = [&](const std::map<std::string, const Json*>& index, const std::string& key) -> const Json* {
    auto it = index.find(key);
    if (it == index.end()) return nullptr;
    if (it->second == nullptr) unsupported("$ref", ptr, "'" + key + "' names two subschemas; expected one");
    return it->second;
  };
  if (ref[0] == '#') {
    if (const Json* named = found(anchors_, ref)) return *named;
    unsupported("$ref", ptr, "reference '" + ref + "' names no $anchor or $id in the schema");
  }
  const size_t hash = ref.find('#');
  const std::string resource = ref.substr(0, hash);
  const std::string fragment = hash == std::string::npos ? std::string("#") : ref.substr(hash);
  const Json* base = found(ids_, resource);
  if (base == nullptr && root_.is_object() && root_.contains("$id") && root_["$id"].is_string())
    base = found(ids_, without_fragment(against(root_["$id"].get<std::string>(), resource)));
  if (base == nullptr)
    unsupported("$ref", ptr,
                "reference '" + ref +
                    "' names no $id in the schema (expected a local reference: #/..., #name, or the $id of the "
                    "root or of a subschema; nothing is fetched)");
  if (fragment.size() > 1 && fragment[1] != '/') {
    if (const Json* named = found(anchors_, fragment)) return *named;
    unsupported("$ref", ptr, "reference '" + ref + "' names no $anchor in the schema");
  }
  return resolve_pointer(*base, fragment, 1, ptr);
}

// The JSON pointer ref[pos..] (after its '#') from `base`.
const Json& SchemaConverter::resolve_pointer(const Json& base, const std::string& ref, size_t pos,
                                             const std::string& ptr) {
  const Json* cur = &base;
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

}  // namespace brioche::grammar::schema
