// JSON Schema arrays: items, prefixItems, minItems/maxItems.

#include <algorithm>

#include "grammar/schema_converter.h"

namespace brioche::grammar::schema {

// Most distinct values an array with uniqueItems may draw from: the grammar
// has one rule per set of values used so far (2^8 = 256 rules).
constexpr size_t kMaxUniqueDomain = 8;

bool SchemaConverter::unique_item_domain(const Json& s, std::vector<std::vector<Json>>& domain, std::string& why) {
  domain.clear();
  const char* expected =
      "expected a plain array (\"type\": \"array\") whose items are one enum, const or boolean schema of at most 8 "
      "distinct values: the grammar then writes the items as a set; other arrays cannot be kept duplicate-free by "
      "a grammar";
  why = expected;
  if (!(s.contains("type") && s["type"] == "array") || !s.contains("items") || s.contains("prefixItems")) return false;
  for (auto& [k, v] : s.items())
    if (k != "type" && k != "items" && k != "uniqueItems" && k != "minItems" && k != "maxItems" && !is_annotation(k))
      return false;
  const Json* items = &s["items"];
  for (int hops = 0;
       items->is_object() && items->contains("$ref") && (*items)["$ref"].is_string() && items->size() == 1 && hops < 8;
       ++hops)
    items = &resolve((*items)["$ref"].get<std::string>(), "");
  if (!items->is_object()) return false;
  std::vector<Json> values;
  std::string type;
  for (auto& [k, v] : items->items()) {
    if (k == "enum" && v.is_array()) {
      values.assign(v.begin(), v.end());
    } else if (k == "const") {
      values.assign(1, v);
    } else if (k == "type" && v.is_string()) {
      type = v.get<std::string>();
    } else if (!is_annotation(k)) {
      return false;
    }
  }
  if (!items->contains("enum") && !items->contains("const")) {
    if (type != "boolean") return false;
    values = {Json(true), Json(false)};
  }
  for (const Json& v : values) {
    if (!type.empty() && !has_type(v, type)) continue;  // not a valid item: never written
    auto same = std::find_if(domain.begin(), domain.end(), [&](const std::vector<Json>& e) { return e[0] == v; });
    if (same == domain.end())
      domain.push_back({v});
    else if (std::find_if(same->begin(), same->end(), [&](const Json& w) { return w.dump() == v.dump(); }) ==
             same->end())
      same->push_back(v);  // another spelling of the same value
  }
  if (domain.empty() || domain.size() > kMaxUniqueDomain) {
    why = std::string(expected) + "; found " + std::to_string(domain.size()) + " distinct values";
    return false;
  }
  why.clear();
  return true;
}

// The items as a set: one rule per set of values already written (a bit
// mask over the domain), whose alternatives are the end of the array (once
// minItems are written) or one more value not yet in the set.
std::string SchemaConverter::visit_unique_array(const Json& s, const std::string& ptr, const std::string& hint) {
  std::vector<std::vector<Json>> domain;
  std::string why;
  if (!unique_item_domain(s, domain, why)) unsupported("uniqueItems", ptr, why);
  const int64_t n = static_cast<int64_t>(domain.size());
  const int64_t min_items = count_of(s, "minItems", ptr, 0);
  const int64_t max_bound = count_of(s, "maxItems", ptr, -1);
  const int64_t max_items = max_bound < 0 ? n : std::min(max_bound, n);
  if (min_items < 0 || max_items < min_items)
    unsupported("minItems", ptr,
                "expected 0 <= minItems <= maxItems and minItems at most the " + std::to_string(n) +
                    " distinct values the items may take (uniqueItems)");
  if (max_items == 0) return add_rule(hint + "_arr", open('[') + "\"]\"");
  auto value = [&](int64_t i) {
    std::string out;
    for (const Json& spelling : domain[i]) out += (out.empty() ? "" : " | ") + literal(spelling);
    return domain[i].size() > 1 ? "(" + out + ")" : out;
  };
  // rest[set]: what may follow once the values in `set` are written; made
  // from the largest sets down, so each rule's successors exist.
  std::vector<std::string> rest(size_t(1) << n);
  for (int64_t size = max_items; size >= 1; --size)
    for (uint32_t set = 0; set < (1u << n); ++set) {
      if (__builtin_popcount(set) != size) continue;
      std::string body;
      if (size >= min_items) body = "\"\"";
      if (size < max_items)
        for (int64_t i = 0; i < n; ++i)
          if (!(set >> i & 1)) body += (body.empty() ? "" : " | ") + comma() + value(i) + " " + rest[set | 1u << i];
      rest[set] = add_rule(hint + "_set", body);
    }
  std::string first;
  for (int64_t i = 0; i < n; ++i) first += (first.empty() ? "" : " | ") + value(i) + " " + rest[1u << i];
  std::string body = open('[') + "(" + first + ")" + close(']');
  if (min_items == 0) body += " | " + open('[') + "\"]\"";
  return add_rule(hint + "_arr", body);
}

std::string SchemaConverter::visit_array(const Json& s, const std::string& ptr, const std::string& hint) {
  // uniqueItems: items of a few values are written as a set; any other
  // item is a call of an item rule (`%unique_item`) that the matcher
  // compares with the earlier items at run time (unique_items.h).
  bool distinct = false;
  if (s.contains("uniqueItems") && s["uniqueItems"] == true) {
    std::vector<std::vector<Json>> domain;
    std::string why;
    if (unique_item_domain(s, domain, why)) return visit_unique_array(s, ptr, hint);
    // The values seen live on the array rule's frame: every item must be
    // called from that one rule, which the tail rules of prefixItems are not.
    if (s.contains("prefixItems"))
      unsupported("uniqueItems", ptr,
                  "expected items without prefixItems: the items of a tuple are not compared with each other");
    distinct = true;
  }
  auto item_rule = [&](const std::string& item, const std::string& name) {
    return distinct ? add_rule(name, "%unique_item " + item) : item;
  };
  int64_t min_items = count_of(s, "minItems", ptr, 0);
  int64_t max_items = count_of(s, "maxItems", ptr, -1);
  if (min_items < 0 || (max_items >= 0 && max_items < min_items))
    unsupported("minItems", ptr, "expected 0 <= minItems <= maxItems");
  std::vector<std::string> prefix;
  if (s.contains("prefixItems")) {
    const Json& p = s["prefixItems"];
    if (!p.is_array()) unsupported("prefixItems", ptr, "expected an array");
    for (size_t i = 0; i < p.size(); ++i)
      prefix.push_back(visit(p[i], pointer_child(pointer_child(ptr, "prefixItems"), std::to_string(i)),
                             hint + "_item" + std::to_string(i)));
  }
  // Item schema after the prefix: none (closed), a schema, or any value.
  std::string rest;
  bool closed = false;
  if (s.contains("items")) {
    const Json& it = s["items"];
    if (it.is_boolean() && !it.get<bool>())
      closed = true;
    else
      rest = item_rule(visit(it, pointer_child(ptr, "items"), hint + "_item"), hint + "_uitem");
  } else if (!prefix.empty() && opt_.strict) {
    closed = true;
  } else if (prefix.empty() && min_items == 0 && max_items < 0 && !distinct) {
    return basic("json_array");
  } else {
    rest = item_rule(basic("json_value"), hint + "_uitem");
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

}  // namespace brioche::grammar::schema
