// Value construction and Python semantics: truthiness, equality, ordering,
// str()/repr(), float formatting and json.dumps.
#include "template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "template/limits.h"

namespace brioche::tmpl {

void render_fail(std::string message) { throw RenderFailure{std::move(message)}; }

// ---- RenderBudget -------------------------------------------------------------

namespace {
thread_local RenderBudget* active_budget = nullptr;

std::string mib(int64_t bytes) {
  return bytes % (int64_t{1} << 20) == 0 ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

[[noreturn]] void fail_depth(std::string_view what) {
  render_fail(std::string(what) + " nests lists and dicts more than " + std::to_string(kMaxValueDepth) +
              " deep; the limit is " + std::to_string(kMaxValueDepth));
}
}  // namespace

ScopedRenderBudget::ScopedRenderBudget(RenderBudget& budget) : previous_(active_budget) { active_budget = &budget; }
ScopedRenderBudget::~ScopedRenderBudget() { active_budget = previous_; }

void charge_work(int64_t bytes) {
  RenderBudget* b = active_budget;
  if (!b) return;
  b->work += bytes;
  if (b->work > b->max_work)
    render_fail("the render built, copied or searched more than " + mib(b->max_work) +
                " of strings and lists; the limit is " + mib(b->max_work));
}

void check_bytes(size_t bytes, std::string_view what) {
  RenderBudget* b = active_budget;
  if (b && bytes > b->max_bytes)
    render_fail(std::string(what) + " of " + std::to_string(bytes) + " bytes exceeds the output limit of " +
                mib(int64_t(b->max_bytes)));
}

// ---- Dict -------------------------------------------------------------------

// Lookups scan: template dicts are small, and a hostile big one pays for
// each scan out of the render's work budget.
const Value* Dict::find(std::string_view key) const {
  charge_work(int64_t(entries.size() * sizeof(Value)));
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  charge_work(int64_t(entries.size() * sizeof(Value)));
  for (const auto& [k, v] : entries)
    if (equal(k, key)) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  charge_work(int64_t(entries.size() * sizeof(Value)));
  for (auto& [k, v] : entries) {
    if (equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

// ---- Value ------------------------------------------------------------------

Value Value::undefined(std::string hint) {
  Value v;
  v.ptr_ = std::make_shared<std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.scalar_.b = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.scalar_.i = i;
  return v;
}
Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::Float;
  v.scalar_.f = f;
  return v;
}
Value Value::string(std::string s) {
  check_bytes(s.size(), "a string");
  charge_work(int64_t(s.size()));
  Value v;
  v.kind_ = Kind::String;
  v.ptr_ = std::make_shared<std::string>(std::move(s));
  return v;
}
// The depth is computed once here, so that no value a render holds is deeper
// than kMaxValueDepth and freeing one never recurses past that.
Value Value::list(std::vector<Value> items) {
  check_bytes(items.size() * sizeof(Value), "a list");
  charge_work(int64_t(items.size() * sizeof(Value)));
  int deepest = 0;
  for (const Value& item : items) deepest = std::max(deepest, item.depth());
  if (deepest + 1 > kMaxValueDepth) fail_depth("the list");
  Value v;
  v.kind_ = Kind::List;
  v.depth_ = uint16_t(deepest + 1);
  v.ptr_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}
Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}
Value Value::dict(Dict d) {
  charge_work(int64_t(d.entries.size() * 2 * sizeof(Value)));
  int deepest = 0;
  for (const auto& [key, value] : d.entries) deepest = std::max({deepest, key.depth(), value.depth()});
  if (deepest + 1 > kMaxValueDepth) fail_depth("the dict");
  Value v;
  v.kind_ = Kind::Dict;
  v.depth_ = uint16_t(deepest + 1);
  v.ptr_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::make_namespace(Dict attrs) {
  Value v = dict(std::move(attrs));
  v.kind_ = Kind::Namespace;
  v.depth_ = 1;  // its attributes change later; Renderer empties every namespace before freeing values
  return v;
}
Value Value::callable(std::string name, std::function<Value(Renderer&, CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::Callable;
  v.ptr_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

// The deepest nesting of `j`, walked with an explicit stack (it may be deep).
static int json_depth(const nlohmann::ordered_json& j) {
  int deepest = 0;
  std::vector<std::pair<const nlohmann::ordered_json*, int>> pending{{&j, 0}};
  while (!pending.empty()) {
    auto [node, level] = pending.back();
    pending.pop_back();
    if (!node->is_structured()) continue;
    deepest = std::max(deepest, level + 1);
    for (const auto& child : *node) pending.emplace_back(&child, level + 1);
  }
  return deepest;
}

static Value from_json_at(const nlohmann::ordered_json& j, int level, const nlohmann::ordered_json& root) {
  using J = nlohmann::ordered_json::value_t;
  if (j.is_structured() && level >= kMaxValueDepth)
    render_fail("the value nests " + std::to_string(json_depth(root)) + " levels of arrays/objects; the limit is " +
                std::to_string(kMaxValueDepth));
  switch (j.type()) {
    case J::null: return Value::none();
    case J::boolean: return Value::boolean(j.get<bool>());
    case J::number_integer: return Value::integer(j.get<int64_t>());
    case J::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) render_fail("integer " + std::to_string(u) + " does not fit in 64 bits");
      return Value::integer(int64_t(u));
    }
    case J::number_float: return Value::floating(j.get<double>());
    case J::string: return Value::string(j.get<std::string>());
    case J::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, level + 1, root));
      return Value::list(std::move(items));
    }
    case J::object: {
      Dict d;
      d.entries.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.entries.emplace_back(Value::string(k), from_json_at(e, level + 1, root));
      return Value::dict(std::move(d));
    }
    default: render_fail("unsupported JSON value (binary or discarded)");
  }
}

Value Value::from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0, j); }

double Value::as_number() const {
  switch (kind_) {
    case Kind::Int: return double(scalar_.i);
    case Kind::Float: return scalar_.f;
    case Kind::Bool: return scalar_.b ? 1.0 : 0.0;
    default: render_fail(std::string("expected a number, got ") + std::string(type_name()));
  }
}

const std::string& Value::as_string() const {
  static const std::string empty;
  if (kind_ != Kind::String && kind_ != Kind::Undefined)
    render_fail("expected a string, got " + std::string(type_name()));
  return ptr_ ? *static_cast<const std::string*>(ptr_.get()) : empty;
}
const std::vector<Value>& Value::items() const {
  if (!is_sequence()) render_fail("expected a list, got " + std::string(type_name()));
  return *static_cast<const std::vector<Value>*>(ptr_.get());
}
const Dict& Value::as_dict() const {
  if (kind_ != Kind::Dict && kind_ != Kind::Namespace) render_fail("expected a dict, got " + std::string(type_name()));
  return *static_cast<const Dict*>(ptr_.get());
}
Dict& Value::namespace_attrs() const {
  if (kind_ != Kind::Namespace) render_fail("expected a namespace, got " + std::string(type_name()));
  return *static_cast<Dict*>(ptr_.get());
}
const Callable& Value::as_callable() const {
  if (kind_ != Kind::Callable) render_fail("'" + std::string(type_name()) + "' object is not callable");
  return *static_cast<const Callable*>(ptr_.get());
}

std::string_view Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Callable: return "function";
  }
  return "?";
}

// ---- Python semantics ---------------------------------------------------------

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.as_int() != 0;
    case Value::Kind::Float: return v.as_number() != 0.0;
    case Value::Kind::String: return !v.as_string().empty();
    case Value::Kind::List:
    case Value::Kind::Tuple: return !v.items().empty();
    case Value::Kind::Dict: return !v.as_dict().entries.empty();
    default: return true;
  }
}

// The walkers below (==, <, repr, json.dumps) follow namespaces, which
// Value::depth() does not see into, so each guards its own recursion.
static void check_walk_depth(int level) {
  if (level > kMaxValueDepth) fail_depth("the value");
}

static bool equal_at(const Value& a, const Value& b, int level) {
  check_walk_depth(level);
  charge_work(sizeof(Value));
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_number() == b.as_number();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.as_string() == b.as_string();
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equal_at(x[i], y[i], level + 1)) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const auto &x = a.as_dict(), &y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !equal_at(v, *other, level + 1)) return false;
      }
      return true;
    }
    default: return &a.as_dict() == &b.as_dict();  // namespaces: identity
  }
}

bool equal(const Value& a, const Value& b) { return equal_at(a, b, 0); }

static int compare_at(const Value& a, const Value& b, std::string_view op, int level) {
  check_walk_depth(level);
  charge_work(sizeof(Value));
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    double x = a.as_number(), y = b.as_number();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // UTF-8 byte order == code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.kind() == b.kind() && a.is_sequence()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal_at(x[i], y[i], level + 1)) continue;
      return compare_at(x[i], y[i], op, level + 1);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  render_fail("'" + std::string(op) + "' not supported between instances of '" + std::string(a.type_name()) +
              "' and '" + std::string(b.type_name()) + "'");
}

int compare(const Value& a, const Value& b, std::string_view op) { return compare_at(a, b, op, 0); }

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  // Shortest round-trip digits in scientific form: "-d.ddde+XX".
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  int exponent = std::stoi(sci.substr(e_pos + 1));
  bool negative = mantissa[0] == '-';
  std::string digits;
  for (char c : mantissa)
    if (c >= '0' && c <= '9') digits += c;
  std::string out = negative ? "-" : "";
  // Python's repr: positional when -4 <= exponent < 16, else scientific.
  if (exponent >= -4 && exponent < 16) {
    int point = exponent + 1;  // digits before the decimal point
    if (point <= 0) {
      out += "0." + std::string(size_t(-point), '0') + digits;
    } else if (size_t(point) >= digits.size()) {
      out += digits + std::string(size_t(point) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, size_t(point)) + "." + digits.substr(size_t(point));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

static bool printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return false;
  if ((c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x206f)) return false;
  if (c == 0x3000 || c == 0xfeff || (c >= 0xd800 && c <= 0xdfff)) return false;
  return true;
}

static std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    if (c == '\\')
      out += "\\\\";
    else if (c == char32_t(quote)) {
      out += '\\';
      out += quote;
    } else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (!printable(c)) {
      char buf[16];
      if (c < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      else if (c < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(c));
      out += buf;
    } else
      utf8_append(out, c);
  }
  out += quote;
  return out;
}

// Appends repr(v); the output is checked as it grows, since a short list can
// hold the same long string a million times.
static void repr_into(std::string& out, const Value& v, int level) {
  check_walk_depth(level);
  switch (v.kind()) {
    case Value::Kind::String: out += repr_string(v.as_string()); break;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      bool tuple = v.kind() == Value::Kind::Tuple;
      out += tuple ? "(" : "[";
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        repr_into(out, items[i], level + 1);
      }
      if (tuple && items.size() == 1) out += ",";
      out += tuple ? ")" : "]";
      break;
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      bool ns = v.is_namespace();
      out += ns ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.as_dict().entries) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, k, level + 1);
        out += ": ";
        repr_into(out, x, level + 1);
      }
      out += ns ? "}>" : "}";
      break;
    }
    case Value::Kind::Undefined: out += "Undefined"; break;
    default: out += to_str(v); break;
  }
  check_bytes(out.size(), "repr()");
}

std::string repr(const Value& v) {
  std::string out;
  repr_into(out, v, 0);
  charge_work(int64_t(out.size()));
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.as_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.as_int());
    case Value::Kind::Float: return format_float(v.as_number());
    case Value::Kind::String: return v.as_string();
    case Value::Kind::Callable: return "<function " + v.as_callable().name + ">";
    default: return repr(v);
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List:
    case Value::Kind::Tuple: charge_work(int64_t(v.items().size() * sizeof(Value))); return v.items();
    case Value::Kind::Dict: {
      charge_work(int64_t(v.as_dict().entries.size() * sizeof(Value)));
      std::vector<Value> keys;
      keys.reserve(v.as_dict().entries.size());
      for (const auto& [k, x] : v.as_dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::String: {
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(v.as_string())) chars.push_back(Value::string(utf8_encode(std::u32string(1, c))));
      return chars;
    }
    default: render_fail("'" + std::string(v.type_name()) + "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: {
      charge_work(int64_t(v.as_string().size()));
      int64_t n = 0;
      for (unsigned char c : v.as_string()) n += (c & 0xC0) != 0x80;
      return n;
    }
    case Value::Kind::List:
    case Value::Kind::Tuple: return int64_t(v.items().size());
    case Value::Kind::Dict: return int64_t(v.as_dict().entries.size());
    default: render_fail("object of type '" + std::string(v.type_name()) + "' has no len()");
  }
}

// ---- json.dumps -------------------------------------------------------------

static void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

static std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String: return k.as_string();
    case Value::Kind::Int: return std::to_string(k.as_int());
    case Value::Kind::Float: return format_float(k.as_number());
    case Value::Kind::Bool: return k.as_bool() ? "true" : "false";
    case Value::Kind::None: return "null";
    default: render_fail("keys must be str, int, float, bool or None, not " + std::string(k.type_name()));
  }
}

static void json_value(std::string& out, const Value& v, const JsonStyle& style, int depth) {
  check_walk_depth(depth);
  check_bytes(out.size(), "tojson output");
  auto newline = [&](int level) {
    if (style.indent < 0) return;
    out += '\n';
    out.append(size_t(style.indent) * size_t(level), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      double f = v.as_number();
      if (std::isnan(f))
        out += "NaN";
      else if (std::isinf(f))
        out += f < 0 ? "-Infinity" : "Infinity";
      else
        out += format_float(f);
      return;
    }
    case Value::Kind::String: json_string(out, v.as_string()); return;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += style.item_separator;
        newline(depth + 1);
        json_value(out, items[i], style, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, x] : v.as_dict().entries) entries.emplace_back(json_key(k), &x);
      if (style.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      if (entries.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += style.item_separator;
        newline(depth + 1);
        json_string(out, entries[i].first);
        out += style.key_separator;
        json_value(out, *entries[i].second, style, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      render_fail("Object of type " + std::string(v.kind() == Value::Kind::Undefined ? "Undefined" : v.type_name()) +
                  " is not JSON serializable");
  }
}

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_value(out, v, style, 0);
  check_bytes(out.size(), "tojson output");
  charge_work(int64_t(out.size()));
  return out;
}

// ---- UTF-8 ------------------------------------------------------------------

std::u32string utf8_decode(std::string_view s) {
  charge_work(int64_t(s.size()));
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    bool ok = extra >= 0 && i + size_t(extra) < s.size();
    char32_t cp = extra <= 0 ? c : extra == 1 ? (c & 0x1F) : extra == 2 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; ok && k <= extra; ++k) {
      unsigned char cc = s[i + size_t(k)];
      if ((cc & 0xC0) != 0x80)
        ok = false;
      else
        cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out += char32_t(0xFFFD);  // invalid byte: replacement character
      ++i;
      continue;
    }
    out += cp;
    i += size_t(extra) + 1;
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

}  // namespace brioche::tmpl
