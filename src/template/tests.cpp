// Jinja's built-in tests (jinja2/tests.py): `x is defined`, `x is string`, ...
#include <unordered_map>

#include "template/builtins.h"
#include "template/evaluator.h"
#include "template/operators.h"
#include "template/strings.h"

namespace brioche::tmpl {
namespace {

const Value& arg(CallArgs& a, const char* test) {
  if (a.positional.empty()) render_fail(std::string("test '") + test + "' needs an argument");
  return a.positional[0];
}

bool t_defined(Renderer&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Renderer&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Renderer&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_string(Renderer&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_number(Renderer&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_integer(Renderer&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Renderer&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_boolean(Renderer&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(Renderer&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(Renderer&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_mapping(Renderer&, const Value& v, CallArgs&) { return v.is_dict(); }
// Undefined iterates as empty in Jinja, so it counts as iterable.
bool t_iterable(Renderer&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
bool t_sequence(Renderer&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
bool t_callable(Renderer&, const Value& v, CallArgs&) { return v.is_callable(); }
bool t_lower(Renderer&, const Value& v, CallArgs&) { return py_islower(to_str(v)); }
bool t_upper(Renderer&, const Value& v, CallArgs&) { return py_isupper(to_str(v)); }
bool t_escaped(Renderer&, const Value&, CallArgs&) { return false; }

int64_t integer_of(const Value& v, const char* test) {
  require_defined(v);
  if (v.is_float()) return int64_t(v.as_number());
  if (!v.is_int() && !v.is_bool())
    render_fail(std::string("test '") + test + "' needs a number, got " + std::string(v.type_name()));
  return v.as_int();
}
bool t_even(Renderer&, const Value& v, CallArgs&) { return integer_of(v, "even") % 2 == 0; }
bool t_odd(Renderer&, const Value& v, CallArgs&) { return integer_of(v, "odd") % 2 != 0; }
bool t_divisibleby(Renderer&, const Value& v, CallArgs& a) {
  int64_t d = integer_of(arg(a, "divisibleby"), "divisibleby");
  if (d == 0) render_fail("integer division or modulo by zero");
  return integer_of(v, "divisibleby") % d == 0;
}

bool t_eq(Renderer&, const Value& v, CallArgs& a) { return equal(v, arg(a, "eq")); }
bool t_ne(Renderer&, const Value& v, CallArgs& a) { return !equal(v, arg(a, "ne")); }
bool t_lt(Renderer&, const Value& v, CallArgs& a) { return compare(v, arg(a, "lt"), "<") < 0; }
bool t_le(Renderer&, const Value& v, CallArgs& a) { return compare(v, arg(a, "le"), "<=") <= 0; }
bool t_gt(Renderer&, const Value& v, CallArgs& a) { return compare(v, arg(a, "gt"), ">") > 0; }
bool t_ge(Renderer&, const Value& v, CallArgs& a) { return compare(v, arg(a, "ge"), ">=") >= 0; }
bool t_in(Renderer&, const Value& v, CallArgs& a) { return contains(arg(a, "in"), v); }
// `is sameas`: identity, meaningful for the singletons none/true/false.
bool t_sameas(Renderer&, const Value& v, CallArgs& a) {
  const Value& other = arg(a, "sameas");
  if (v.kind() != other.kind()) return false;
  if (v.is_none() || v.is_undefined()) return true;
  if (v.is_bool()) return v.as_bool() == other.as_bool();
  if (v.is_int()) return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;  // CPython small ints
  return false;
}
bool t_filter(Renderer&, const Value& v, CallArgs&) { return v.is_string() && find_filter(v.as_string()); }
bool t_test(Renderer&, const Value& v, CallArgs&) { return v.is_string() && find_test(v.as_string()); }

const std::unordered_map<std::string_view, TestFn>& test_table() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"string", t_string},
      {"number", t_number},
      {"integer", t_integer},
      {"float", t_float},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"lower", t_lower},
      {"upper", t_upper},
      {"escaped", t_escaped},
      {"even", t_even},
      {"odd", t_odd},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
      {"filter", t_filter},
      {"test", t_test},
  };
  return table;
}

}  // namespace

TestFn find_test(std::string_view name) {
  const auto& table = test_table();
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace brioche::tmpl
