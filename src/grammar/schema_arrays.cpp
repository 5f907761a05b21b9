// JSON Schema arrays: items, prefixItems, minItems/maxItems.

#include <algorithm>

#include "grammar/schema_converter.h"

namespace brioche::grammar::schema {

std::string SchemaConverter::visit_array(const Json& s, const std::string& ptr, const std::string& hint) {
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
      rest = visit(it, pointer_child(ptr, "items"), hint + "_item");
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

}  // namespace brioche::grammar::schema
