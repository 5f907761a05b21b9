#include "template/operators.h"

#include <cmath>

#include "template/builtins.h"

namespace brioche::tmpl {

void require_defined(const Value& v) {
  if (v.is_undefined()) render_fail(v.as_string().empty() ? "value is undefined" : v.as_string());
}

static std::string owner_name(const Value& obj) {
  if (obj.is_none()) return "None";
  return std::string(obj.type_name()) + " object";
}

Value get_attribute(const Value& obj, std::string_view name) {
  require_defined(obj);
  // Jinja tries the Python attribute first: dict methods shadow keys.
  Value method = find_method(obj, name);
  if (!method.is_undefined()) return method;
  if (obj.is_dict() || obj.is_namespace()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  }
  return Value::undefined("'" + owner_name(obj) + "' has no attribute '" + std::string(name) + "'");
}

static std::optional<size_t> normalize_index(int64_t index, size_t size) {
  if (index < 0) index += int64_t(size);
  if (index < 0 || index >= int64_t(size)) return std::nullopt;
  return size_t(index);
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if ((obj.is_sequence() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    if (obj.is_string()) {
      std::u32string chars = utf8_decode(obj.as_string());
      if (auto i = normalize_index(key.as_int(), chars.size())) return Value::string(utf8_encode(chars.substr(*i, 1)));
    } else if (auto i = normalize_index(key.as_int(), obj.items().size())) {
      return obj.items()[*i];
    }
    return Value::undefined("'" + owner_name(obj) + "' has no element " + std::to_string(key.as_int()));
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  }
  // Jinja falls back to the attribute for string keys.
  if (key.is_string()) return get_attribute(obj, key.as_string());
  return Value::undefined("'" + owner_name(obj) + "' has no element " + repr(key));
}

// Python's slice.indices(): clamps start/stop for the step's direction.
static void slice_indices(int64_t size, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step,
                          int64_t& first, int64_t& last) {
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += size;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= size) {
      x = step < 0 ? size - 1 : size;
    }
    return x;
  };
  first = clamp(start, step < 0 ? size - 1 : 0);
  last = clamp(stop, step < 0 ? -1 : size);
}

Value slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
            std::optional<int64_t> step_opt) {
  require_defined(obj);
  int64_t step = step_opt.value_or(1);
  if (step == 0) render_fail("slice step cannot be zero");
  auto pick = [&](int64_t size, auto&& take) {
    int64_t first = 0, last = 0;
    slice_indices(size, start, stop, step, first, last);
    for (int64_t i = first; step > 0 ? i < last : i > last; i += step) take(size_t(i));
  };
  if (obj.is_string()) {
    std::u32string chars = utf8_decode(obj.as_string()), out;
    pick(int64_t(chars.size()), [&](size_t i) { out += chars[i]; });
    return Value::string(utf8_encode(out));
  }
  if (obj.is_sequence()) {
    const auto& items = obj.items();
    std::vector<Value> out;
    pick(int64_t(items.size()), [&](size_t i) { out.push_back(items[i]); });
    return obj.kind() == Value::Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  render_fail("'" + std::string(obj.type_name()) + "' object is not subscriptable");
}

static Value repeat(const Value& seq, int64_t times, size_t max_bytes) {
  if (times <= 0) return seq.is_string() ? Value::string("") : Value::list({});
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && uint64_t(times) > max_bytes / s.size()) render_fail("string repetition exceeds the output limit");
    std::string out;
    out.reserve(s.size() * size_t(times));
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.items();
  if (!items.empty() && uint64_t(times) > max_bytes / (items.size() * sizeof(Value)))
    render_fail("list repetition exceeds the size limit");
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.kind() == Value::Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

[[noreturn]] static void unsupported(std::string_view op, const Value& a, const Value& b) {
  render_fail("unsupported operand type(s) for " + std::string(op) + ": '" + std::string(a.type_name()) + "' and '" +
              std::string(b.type_name()) + "'");
}

static int64_t checked(bool overflow, int64_t value) {
  if (overflow) render_fail("integer overflow (values beyond 64 bits are not supported)");
  return value;
}

static double python_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

Value binary_op(std::string_view op, const Value& a, const Value& b, size_t max_bytes) {
  if (op == "~") {
    std::string s = to_str(a) + to_str(b);
    if (s.size() > max_bytes) render_fail("string exceeds the output limit");
    return Value::string(std::move(s));
  }
  require_defined(a);
  require_defined(b);
  bool numbers = a.is_number() && b.is_number();
  bool ints = numbers && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) {
      int64_t r = 0;
      bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
      return Value::integer(checked(overflow, r));
    }
    if (numbers) return Value::floating(a.as_number() + b.as_number());
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > max_bytes) render_fail("string exceeds the output limit");
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_sequence() && a.kind() == b.kind()) {
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return a.kind() == Value::Kind::Tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    if (a.is_string()) render_fail("can only concatenate str (not \"" + std::string(b.type_name()) + "\") to str");
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r = 0;
      bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
      return Value::integer(checked(overflow, r));
    }
    if (numbers) return Value::floating(a.as_number() - b.as_number());
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r = 0;
      bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
      return Value::integer(checked(overflow, r));
    }
    if (numbers) return Value::floating(a.as_number() * b.as_number());
    if ((a.is_string() || a.is_sequence()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), max_bytes);
    if ((b.is_string() || b.is_sequence()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), max_bytes);
    unsupported(op, a, b);
  }
  if (!numbers) unsupported(op, a, b);
  if (op == "/") {
    if (b.as_number() == 0) render_fail("division by zero");
    return Value::floating(a.as_number() / b.as_number());
  }
  if (op == "//" || op == "%") {
    if (b.as_number() == 0) render_fail(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      if (x == INT64_MIN && y == -1) render_fail("integer overflow (values beyond 64 bits are not supported)");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        q -= 1;
        r += y;
      }
      return Value::integer(op == "//" ? q : r);
    }
    double x = a.as_number(), y = b.as_number();
    if (op == "%") return Value::floating(python_fmod(x, y));
    return Value::floating(std::floor(x / y));
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), exp = b.as_int(), result = 1;
      while (exp > 0) {
        if (exp & 1) checked(__builtin_mul_overflow(result, base, &result), 0);
        exp >>= 1;
        if (exp > 0) checked(__builtin_mul_overflow(base, base, &base), 0);
      }
      return Value::integer(result);
    }
    return Value::floating(std::pow(a.as_number(), b.as_number()));
  }
  render_fail("unknown operator '" + std::string(op) + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
      if (!item.is_string())
        render_fail("'in <string>' requires string as left operand, not " + std::string(item.type_name()));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      for (const auto& x : container.items())
        if (equal(x, item)) return true;
      return false;
    case Value::Kind::Dict: return container.as_dict().find(item) != nullptr;
    default: render_fail("argument of type '" + std::string(container.type_name()) + "' is not iterable");
  }
}

}  // namespace brioche::tmpl
