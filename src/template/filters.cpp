// Jinja's built-in filters (jinja2/filters.py) that chat templates use, with
// transformers' tojson (json.dumps, ensure_ascii=False, indent/separators/sort_keys).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "template/builtins.h"
#include "template/evaluator.h"
#include "template/operators.h"
#include "template/strings.h"

namespace brioche::tmpl {

// ---- argument binding -----------------------------------------------------------

BoundArgs::BoundArgs(std::string_view function, CallArgs& args, std::initializer_list<const char*> params)
    : function_(function), params_(params), bound_(params.size(), nullptr) {
  if (args.positional.size() > params_.size())
    render_fail(std::string(function_) + "() takes at most " + std::to_string(params_.size()) + " argument(s), got " +
                std::to_string(args.positional.size()));
  for (size_t i = 0; i < args.positional.size(); ++i) bound_[i] = &args.positional[i];
  for (auto& keyword : args.keyword) {
    const std::string& key =
        keyword.first;  // a named variable, not a structured binding: older clang cannot capture those
    Value& value = keyword.second;
    auto it = std::find_if(params_.begin(), params_.end(), [&](const char* p) { return key == p; });
    if (it == params_.end())
      render_fail(std::string(function_) + "() got an unexpected keyword argument '" + key + "'");
    size_t i = size_t(it - params_.begin());
    if (bound_[i]) render_fail(std::string(function_) + "() got multiple values for argument '" + key + "'");
    bound_[i] = &value;
  }
}

const Value& BoundArgs::required(size_t index) const {
  if (!bound_[index]) render_fail(std::string(function_) + "() missing required argument '" + params_[index] + "'");
  return *bound_[index];
}

namespace {

std::optional<std::string> optional_string(const Value* v) {
  if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
  return to_str(*v);
}

int64_t int_arg(const Value* v, int64_t fallback, const char* what) {
  if (!v || v->is_none()) return fallback;
  if (!v->is_int() && !v->is_bool())
    render_fail(std::string(what) + " must be an integer, got " + std::string(v->type_name()));
  return v->as_int();
}

// Jinja's make_attrgetter: "a.b.0" walks items (and attributes) step by step.
Value attribute_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value v = item;
  const std::string& path = attribute.as_string();
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = digits ? get_item(v, Value::integer(std::stoll(part))) : get_item(v, Value::string(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// Case-insensitive keys for sort/unique/dictsort/min/max (Jinja's ignore_case).
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.as_string()));
  return v;
}

// ---- strings ----

Value f_trim(Renderer&, const Value& in, CallArgs& a) {
  BoundArgs args("trim", a, {"chars"});
  return Value::string(py_strip(to_str(in), optional_string(args.get(0)), true, true));
}
Value f_upper(Renderer&, const Value& in, CallArgs&) { return Value::string(py_upper(to_str(in))); }
Value f_lower(Renderer&, const Value& in, CallArgs&) { return Value::string(py_lower(to_str(in))); }
Value f_capitalize(Renderer&, const Value& in, CallArgs&) { return Value::string(py_capitalize(to_str(in))); }
Value f_title(Renderer&, const Value& in, CallArgs&) { return Value::string(jinja_title(to_str(in))); }
Value f_string(Renderer&, const Value& in, CallArgs&) { return in.is_string() ? in : Value::string(to_str(in)); }
Value f_safe(Renderer&, const Value& in, CallArgs&) { return in; }
Value f_escape(Renderer&, const Value& in, CallArgs&) { return Value::string(html_escape(to_str(in))); }

Value f_replace(Renderer& r, const Value& in, CallArgs& a) {
  BoundArgs args("replace", a, {"old", "new", "count"});
  std::string out =
      py_replace(to_str(in), to_str(args.required(0)), to_str(args.required(1)), int_arg(args.get(2), -1, "count"));
  r.check_size(out.size());
  return Value::string(std::move(out));
}

Value f_indent(Renderer&, const Value& in, CallArgs& a) {
  BoundArgs args("indent", a, {"width", "first", "blank"});
  const Value* width = args.get(0);
  const int64_t spaces = width && width->is_string() ? 0 : std::max<int64_t>(0, int_arg(width, 4, "width"));
  check_bytes(size_t(spaces), "the indentation");
  std::string indentation = width && width->is_string() ? width->as_string() : std::string(size_t(spaces), ' ');
  bool first = args.get(1) && truthy(*args.get(1));
  bool blank = args.get(2) && truthy(*args.get(2));
  std::vector<std::string> lines = py_splitlines(to_str(in) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += '\n';
      if (blank || !lines[i].empty()) out += indentation;
    }
    out += lines[i];
    check_bytes(out.size(), "indent() result");  // the indentation repeats once per line
  }
  if (first) out = indentation + out;
  return Value::string(std::move(out));
}

Value f_center(Renderer& r, const Value& in, CallArgs& a) {
  BoundArgs args("center", a, {"width"});
  std::u32string text = utf8_decode(to_str(in));
  int64_t width = int_arg(args.get(0), 80, "width");
  r.check_size(size_t(std::max<int64_t>(width, 0)));
  if (width <= int64_t(text.size())) return Value::string(utf8_encode(text));
  int64_t margin = width - int64_t(text.size());
  int64_t left = margin / 2 + (margin & width & 1);  // CPython's str.center split
  return Value::string(std::string(size_t(left), ' ') + utf8_encode(text) + std::string(size_t(margin - left), ' '));
}

Value f_wordcount(Renderer&, const Value& in, CallArgs&) {
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(to_str(in))) {
    bool word_char =
        (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::integer(words);
}

// ---- json ----

Value f_tojson(Renderer& r, const Value& in, CallArgs& a) {
  BoundArgs args("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle style;
  if (const Value* indent = args.get(1); indent && !indent->is_none()) {
    style.indent = int(std::max<int64_t>(0, int_arg(indent, 0, "indent")));
    style.item_separator = ",";
  }
  if (const Value* sep = args.get(2); sep && !sep->is_none()) {
    if (!sep->is_sequence() || sep->items().size() != 2) render_fail("tojson separators must be a pair of strings");
    style.item_separator = to_str(sep->items()[0]);
    style.key_separator = to_str(sep->items()[1]);
  }
  style.sort_keys = args.get(3) && truthy(*args.get(3));
  std::string out = to_json(in, style);
  if (args.get(0) &&
      truthy(*args.get(0))) {  // ensure_ascii=True: \uXXXX outside ' '..'~' (surrogate pairs above the BMP)
    std::string ascii;
    for (char32_t c : utf8_decode(out)) {
      char buf[16];
      if (c < 0x7f) {  // controls below ' ' were escaped by to_json already; DEL is escaped like json.dumps does
        ascii += char(c);
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
        ascii += buf;
      } else {
        char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", unsigned(0xd800 + (v >> 10)), unsigned(0xdc00 + (v & 0x3ff)));
        ascii += buf;
      }
    }
    out = std::move(ascii);
  }
  r.check_size(out.size());
  return Value::string(std::move(out));
}

// ---- sequences ----

Value f_length(Renderer&, const Value& in, CallArgs&) { return Value::integer(length(in)); }
Value f_list(Renderer&, const Value& in, CallArgs&) { return Value::list(iterate(in)); }

Value f_items(Renderer&, const Value& in, CallArgs&) {
  if (in.is_undefined()) return Value::list({});
  if (!in.is_dict()) render_fail("Can only get item pairs from a mapping, got " + std::string(in.type_name()));
  std::vector<Value> pairs;
  for (const auto& [k, v] : in.as_dict().entries) pairs.push_back(Value::tuple({k, v}));
  return Value::list(std::move(pairs));
}

Value f_dictsort(Renderer&, const Value& in, CallArgs& a) {
  BoundArgs args("dictsort", a, {"case_sensitive", "by", "reverse"});
  if (!in.is_dict()) render_fail("dictsort expects a mapping, got " + std::string(in.type_name()));
  bool case_sensitive = args.get(0) && truthy(*args.get(0));
  std::string by = args.get(1) ? to_str(*args.get(1)) : "key";
  if (by != "key" && by != "value") render_fail("dictsort: 'by' must be 'key' or 'value'");
  bool reverse = args.get(2) && truthy(*args.get(2));
  std::vector<Value> pairs;
  for (const auto& [k, v] : in.as_dict().entries) pairs.push_back(Value::tuple({k, v}));
  size_t field = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    int c = compare(sort_key(x.items()[field], case_sensitive), sort_key(y.items()[field], case_sensitive), "<");
    return reverse ? c > 0 : c < 0;
  });
  return Value::list(std::move(pairs));
}

Value f_join(Renderer& r, const Value& in, CallArgs& a) {
  BoundArgs args("join", a, {"d", "attribute"});
  std::string sep = args.get(0) ? to_str(*args.get(0)) : "";
  std::string out;
  bool first = true;
  for (const Value& item : iterate(in)) {
    if (!first) out += sep;
    first = false;
    out += to_str(args.get(1) && !args.get(1)->is_none() ? attribute_path(item, *args.get(1)) : item);
    r.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value f_first(Renderer&, const Value& in, CallArgs&) {
  std::vector<Value> items = iterate(in);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Renderer&, const Value& in, CallArgs&) {
  std::vector<Value> items = iterate(in);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_reverse(Renderer&, const Value& in, CallArgs&) {
  if (in.is_string()) {
    std::u32string text = utf8_decode(in.as_string());
    std::reverse(text.begin(), text.end());
    return Value::string(utf8_encode(text));
  }
  std::vector<Value> items = iterate(in);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_sort(Renderer&, const Value& in, CallArgs& a) {
  BoundArgs args("sort", a, {"reverse", "case_sensitive", "attribute"});
  bool reverse = args.get(0) && truthy(*args.get(0));
  bool case_sensitive = args.get(1) && truthy(*args.get(1));
  const Value* attribute = args.get(2);
  std::vector<Value> items = iterate(in);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) {
    Value key = attribute && !attribute->is_none() ? attribute_path(item, *attribute) : item;
    keyed.emplace_back(sort_key(key, case_sensitive), std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    int c = compare(x.first, y.first, "<");
    return reverse ? c > 0 : c < 0;
  });
  items.clear();
  for (auto& [k, v] : keyed) items.push_back(std::move(v));
  return Value::list(std::move(items));
}

Value f_unique(Renderer&, const Value& in, CallArgs& a) {
  BoundArgs args("unique", a, {"case_sensitive", "attribute"});
  bool case_sensitive = args.get(0) && truthy(*args.get(0));
  std::vector<Value> seen, out;
  for (const Value& item : iterate(in)) {
    Value key =
        sort_key(args.get(1) && !args.get(1)->is_none() ? attribute_path(item, *args.get(1)) : item, case_sensitive);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value min_max(const Value& in, CallArgs& a, bool want_max) {
  BoundArgs args(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  bool case_sensitive = args.get(0) && truthy(*args.get(0));
  std::vector<Value> items = iterate(in);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  auto key = [&](const Value& v) {
    return sort_key(args.get(1) && !args.get(1)->is_none() ? attribute_path(v, *args.get(1)) : v, case_sensitive);
  };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    int c = compare(key(items[i]), key(items[best]), "<");
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}
Value f_min(Renderer&, const Value& in, CallArgs& a) { return min_max(in, a, false); }
Value f_max(Renderer&, const Value& in, CallArgs& a) { return min_max(in, a, true); }

Value f_sum(Renderer& r, const Value& in, CallArgs& a) {
  BoundArgs args("sum", a, {"attribute", "start"});
  Value total = args.get_or(1, Value::integer(0));
  for (const Value& item : iterate(in)) {
    Value v = args.get(0) && !args.get(0)->is_none() ? attribute_path(item, *args.get(0)) : item;
    total = binary_op("+", total, v, r.limits().max_output_bytes);
  }
  return total;
}

Value f_batch(Renderer&, const Value& in, CallArgs& a) {
  BoundArgs args("batch", a, {"linecount", "fill_with"});
  int64_t size = int_arg(&args.required(0), 1, "linecount");
  if (size <= 0) render_fail("batch size must be positive");
  check_bytes(size_t(size) * sizeof(Value), "a batch");  // fill_with pads the last batch to `size` items
  std::vector<Value> batches, current;
  for (const Value& item : iterate(in)) {
    current.push_back(item);
    if (int64_t(current.size()) == size) batches.push_back(Value::list(std::exchange(current, {})));
  }
  if (!current.empty()) {
    if (const Value* fill = args.get(1); fill && !fill->is_none())
      while (int64_t(current.size()) < size) current.push_back(*fill);
    batches.push_back(Value::list(std::move(current)));
  }
  return Value::list(std::move(batches));
}

// select/reject/selectattr/rejectattr: keep items whose test result == keep.
Value filter_items(Renderer& r, const Value& in, CallArgs& a, bool by_attribute, bool keep, const char* name) {
  std::vector<Value> positional = a.positional;
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (positional.empty()) render_fail(std::string(name) + "() needs an attribute name");
    attribute = positional[next++];
  }
  std::string test = next < positional.size() ? to_str(positional[next++]) : "";
  CallArgs test_args;
  test_args.positional.assign(positional.begin() + long(next), positional.end());
  test_args.keyword = a.keyword;
  std::vector<Value> out;
  for (const Value& item : iterate(in)) {
    Value subject = by_attribute ? attribute_path(item, attribute) : item;
    charge_work(int64_t(test_args.positional.size() * sizeof(Value)));  // the copy below, once per item
    CallArgs call = test_args;
    bool passed = test.empty() ? truthy(subject) : r.call_test(test, subject, call);
    if (passed == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(Renderer& r, const Value& in, CallArgs& a) { return filter_items(r, in, a, false, true, "select"); }
Value f_reject(Renderer& r, const Value& in, CallArgs& a) { return filter_items(r, in, a, false, false, "reject"); }
Value f_selectattr(Renderer& r, const Value& in, CallArgs& a) {
  return filter_items(r, in, a, true, true, "selectattr");
}
Value f_rejectattr(Renderer& r, const Value& in, CallArgs& a) {
  return filter_items(r, in, a, true, false, "rejectattr");
}

Value f_map(Renderer& r, const Value& in, CallArgs& a) {
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [k, v] : a.keyword) {
    if (k == "attribute")
      attribute = &v;
    else if (k == "default")
      fallback = &v;
  }
  if (attribute) {
    for (const Value& item : iterate(in)) {
      Value v = attribute_path(item, *attribute);
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty()) render_fail("map() needs a filter name or attribute=");
  std::string filter = to_str(a.positional[0]);
  CallArgs rest;
  charge_work(int64_t(a.positional.size() * sizeof(Value)));
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : iterate(in)) {
    charge_work(int64_t(rest.positional.size() * sizeof(Value)));  // the copy below, once per item
    CallArgs call = rest;
    out.push_back(r.call_filter(filter, item, call));
  }
  return Value::list(std::move(out));
}

Value f_default(Renderer&, const Value& in, CallArgs& a) {
  BoundArgs args("default", a, {"default_value", "boolean"});
  bool boolean = args.get(1) && truthy(*args.get(1));
  if (in.is_undefined() || (boolean && !truthy(in))) return args.get_or(0, Value::string(""));
  return in;
}

Value f_attr(Renderer&, const Value& in, CallArgs& a) {
  BoundArgs args("attr", a, {"name"});
  return get_attribute(in, to_str(args.required(0)));
}

// ---- numbers ----

std::optional<int64_t> parse_int(std::string text, int base) {
  text = py_strip(text, std::nullopt, true, true);
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  bool negative = false;
  size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  auto prefixed = [&](char p) {
    return i + 1 < text.size() && text[i] == '0' && (text[i + 1] == p || text[i + 1] == p - 32);
  };
  if (base == 0) {
    base = prefixed('x') ? 16 : prefixed('o') ? 8 : prefixed('b') ? 2 : 10;
    if (base != 10) i += 2;
  } else if ((base == 16 && prefixed('x')) || (base == 8 && prefixed('o')) || (base == 2 && prefixed('b'))) {
    i += 2;
  }
  if (i >= text.size()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str() + i, &end, base);
  if (errno || *end != '\0' || text[i] == '-' || text[i] == '+') return std::nullopt;
  return negative ? -v : v;
}

std::optional<double> parse_float(const std::string& raw) {
  std::string text = py_strip(raw, std::nullopt, true, true);
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return v;
}

Value f_int(Renderer&, const Value& in, CallArgs& a) {
  BoundArgs args("int", a, {"default", "base"});
  Value fallback = args.get_or(0, Value::integer(0));
  int base = int(int_arg(args.get(1), 10, "base"));
  if (in.is_int() || in.is_bool()) return Value::integer(in.as_int());
  if (in.is_float()) {
    double f = std::trunc(in.as_number());
    if (!std::isfinite(f) || std::fabs(f) > 9.2e18) return fallback;
    return Value::integer(int64_t(f));
  }
  if (in.is_string()) {
    if (auto v = parse_int(in.as_string(), base)) return Value::integer(*v);
    if (auto f = parse_float(in.as_string()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18)
      return Value::integer(int64_t(std::trunc(*f)));
  }
  return fallback;
}

Value f_float(Renderer&, const Value& in, CallArgs& a) {
  BoundArgs args("float", a, {"default"});
  Value fallback = args.get_or(0, Value::floating(0.0));
  if (in.is_number()) return Value::floating(in.as_number());
  if (in.is_string()) {
    std::string lower = py_lower(py_strip(in.as_string(), std::nullopt, true, true));
    if (lower == "inf" || lower == "+inf" || lower == "infinity") return Value::floating(INFINITY);
    if (lower == "-inf" || lower == "-infinity") return Value::floating(-INFINITY);
    if (lower == "nan") return Value::floating(NAN);
    if (auto f = parse_float(in.as_string())) return Value::floating(*f);
  }
  return fallback;
}

// Python's round(x, ndigits): round half to even.
double python_round(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  double scale = std::pow(10.0, double(digits));
  double y = x * scale;
  return std::nearbyint(y) / scale;  // default rounding mode FE_TONEAREST: ties to even
}

Value f_round(Renderer&, const Value& in, CallArgs& a) {
  BoundArgs args("round", a, {"precision", "method"});
  int64_t precision = int_arg(args.get(0), 0, "precision");
  std::string method = args.get(1) ? to_str(*args.get(1)) : "common";
  require_defined(in);
  if (!in.is_number()) render_fail("round expects a number, got " + std::string(in.type_name()));
  if (method == "common") {
    if (!in.is_float()) return Value::integer(in.as_int());
    return Value::floating(python_round(in.as_number(), precision));
  }
  if (method != "ceil" && method != "floor") render_fail("method must be common, ceil or floor");
  double scale = std::pow(10.0, double(precision));
  double scaled = in.as_number() * scale;
  return Value::floating((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value f_abs(Renderer&, const Value& in, CallArgs&) {
  require_defined(in);
  if (!in.is_number()) render_fail("bad operand type for abs(): '" + std::string(in.type_name()) + "'");
  if (in.is_float()) return Value::floating(std::fabs(in.as_number()));
  if (in.as_int() == INT64_MIN) render_fail("integer overflow");
  return Value::integer(std::llabs(in.as_int()));
}

const std::unordered_map<std::string_view, FilterFn>& filter_table() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"trim", f_trim},
      {"upper", f_upper},
      {"lower", f_lower},
      {"capitalize", f_capitalize},
      {"title", f_title},
      {"string", f_string},
      {"safe", f_safe},
      {"e", f_escape},
      {"escape", f_escape},
      {"forceescape", f_escape},
      {"replace", f_replace},
      {"indent", f_indent},
      {"center", f_center},
      {"wordcount", f_wordcount},
      {"tojson", f_tojson},
      {"length", f_length},
      {"count", f_length},
      {"list", f_list},
      {"items", f_items},
      {"dictsort", f_dictsort},
      {"join", f_join},
      {"first", f_first},
      {"last", f_last},
      {"reverse", f_reverse},
      {"sort", f_sort},
      {"unique", f_unique},
      {"min", f_min},
      {"max", f_max},
      {"sum", f_sum},
      {"batch", f_batch},
      {"select", f_select},
      {"reject", f_reject},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"map", f_map},
      {"default", f_default},
      {"d", f_default},
      {"attr", f_attr},
      {"int", f_int},
      {"float", f_float},
      {"round", f_round},
      {"abs", f_abs},
  };
  return table;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  const auto& table = filter_table();
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace brioche::tmpl
