// Values seen by chat templates: Python's data model as Jinja exposes it
// (None, bool, int, float, str, list, tuple, dict, namespace, callables) plus
// Jinja's Undefined. Containers are immutable and shared (cheap copies);
// only namespaces mutate, which is exactly what `{% set ns.x = ... %}` needs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace brioche::tmpl {

class Value;
class Renderer;

// A call's arguments as written: f(1, 2, key=3).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;  // for error messages: "'name' ..."
  std::function<Value(Renderer&, CallArgs&)> call;
};

// Insertion-ordered mapping (Python dicts keep insertion order, and so must
// tojson and items()). Lookup is linear: template dicts are small.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;

  const Value* find(std::string_view key) const;
  const Value* find(const Value& key) const;
  void set(Value key, Value value);  // replaces in place, else appends
};

// Thrown by value helpers, filters and methods; the evaluator adds the
// template location and turns it into brioche::Error.
struct RenderFailure {
  std::string message;
};
[[noreturn]] void render_fail(std::string message);

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Callable };

  Value() = default;                         // Undefined without a hint
  static Value undefined(std::string hint);  // hint: "'x' is undefined"
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value dict(Dict d);
  static Value make_namespace(Dict attrs);
  static Value callable(std::string name, std::function<Value(Renderer&, CallArgs&)> fn);
  // Fails (RenderFailure) for JSON nested deeper than kMaxValueDepth.
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Callable; }

  bool as_bool() const { return scalar_.b; }
  int64_t as_int() const { return kind_ == Kind::Bool ? int64_t{scalar_.b} : scalar_.i; }
  double as_number() const;                 // int, float or bool as double
  const std::string& as_string() const;     // String; the hint of an Undefined
  const std::vector<Value>& items() const;  // List or Tuple
  const Dict& as_dict() const;
  Dict& namespace_attrs() const;
  const Callable& as_callable() const;

  // Python's type name, for messages: "str", "dict", "NoneType", "undefined".
  std::string_view type_name() const;

  // Levels of lists/tuples/dicts below and including this value: 0 for
  // scalars, 1 for a flat list, 1 for any namespace. Computed when the
  // container is made (containers are immutable), at most kMaxValueDepth.
  int depth() const { return depth_; }

 private:
  Kind kind_ = Kind::Undefined;
  uint16_t depth_ = 0;  // fits in the padding after kind_: Values stay 32 bytes
  union {
    bool b;
    int64_t i;
    double f;
  } scalar_{};
  std::shared_ptr<void> ptr_;  // std::string, std::vector<Value>, Dict or Callable, by kind
};

// ---- The budget of the render running on this thread ----------------------
// Python semantics (building strings, copying lists, comparing, searching
// dicts) run deep inside filters and methods with no Renderer at hand, yet
// each must count against the render's bounds, or a template could loop a
// million times over a million-item list. The Renderer installs its budget
// for the length of a render; outside a render nothing is counted.
struct RenderBudget {
  size_t max_bytes = 0;  // the longest string or list (in bytes of its Values) one operation may build
  int64_t max_work = 0;  // bytes built, copied, compared or searched by the whole render
  int64_t work = 0;
};

class ScopedRenderBudget {
 public:
  explicit ScopedRenderBudget(RenderBudget& budget);
  ~ScopedRenderBudget();
  ScopedRenderBudget(const ScopedRenderBudget&) = delete;
  ScopedRenderBudget& operator=(const ScopedRenderBudget&) = delete;

 private:
  RenderBudget* previous_;
};

// Adds `bytes` of work; fails once the render's total passes max_work.
void charge_work(int64_t bytes);
// Fails when `bytes` (the size of a string or list about to be built, named
// by `what`) passes max_bytes.
void check_bytes(size_t bytes, std::string_view what);

// ---- Python semantics ----------------------------------------------------
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
// <0, 0, >0; fails (TypeError-style) for types Python will not order.
int compare(const Value& a, const Value& b, std::string_view op);
std::string to_str(const Value& v);  // str(v); Undefined -> ""
std::string repr(const Value& v);    // repr(v)
std::string format_float(double f);  // repr(float): shortest round-trip, Python's style
// Items of an iterable as Jinja iterates: list/tuple items, dict keys, string
// characters; Undefined iterates as empty. Fails for non-iterables.
std::vector<Value> iterate(const Value& v);
int64_t length(const Value& v);  // len(v); fails when v has no length

// json.dumps(v, ensure_ascii=False, indent, separators, sort_keys) as
// transformers' tojson filter calls it.
struct JsonStyle {
  int indent = -1;  // < 0: single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonStyle& style);

// ---- UTF-8: Python strings index by code point -----------------------------
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t c);

}  // namespace brioche::tmpl
