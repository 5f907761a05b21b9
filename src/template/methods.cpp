// Methods of str, dict and list values that the sandbox allows (the
// non-mutating ones), and the global functions templates call.
#include <algorithm>
#include <chrono>
#include <ctime>

#include "template/builtins.h"
#include "template/evaluator.h"
#include "template/operators.h"
#include "template/strings.h"

namespace brioche::tmpl {
namespace {

std::optional<std::string> opt_str(const Value* v) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) render_fail("expected a string argument, got " + std::string(v->type_name()));
  return v->as_string();
}

const std::string& str_arg(const Value& v, const char* method) {
  if (!v.is_string()) render_fail(std::string(method) + "() argument must be str, not " + std::string(v.type_name()));
  return v.as_string();
}

int64_t int_or(const Value* v, int64_t fallback) {
  if (!v || v->is_none()) return fallback;
  if (!v->is_int() && !v->is_bool()) render_fail("expected an integer argument, got " + std::string(v->type_name()));
  return v->as_int();
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::list(std::move(items));
}

// startswith/endswith with optional start/end (code point indices) and tuple prefixes.
bool affix_match(const std::string& s, const Value& affix, const Value* start, const Value* end, bool at_start) {
  std::u32string text = utf8_decode(s);
  Value window = slice(Value::string(s), start ? std::optional<int64_t>(int_or(start, 0)) : std::nullopt,
                       end ? std::optional<int64_t>(int_or(end, int64_t(text.size()))) : std::nullopt, std::nullopt);
  const std::string& w = window.as_string();
  auto one = [&](const Value& a) {
    const std::string& x = str_arg(a, at_start ? "startswith" : "endswith");
    return at_start ? w.compare(0, x.size(), x) == 0 && w.size() >= x.size()
                    : w.size() >= x.size() && w.compare(w.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_sequence()) return std::any_of(affix.items().begin(), affix.items().end(), one);
  return one(affix);
}

std::string pad(const std::string& s, const Value* width_v, const Value* fill_v, char side) {
  int64_t width = int_or(width_v, 0);
  std::string fill = fill_v ? str_arg(*fill_v, "pad") : " ";
  if (utf8_decode(fill).size() != 1) render_fail("the fill character must be exactly one character long");
  int64_t n = int64_t(utf8_decode(s).size());
  if (width <= n) return s;
  check_bytes(size_t(width) * fill.size(), "the padded string");
  int64_t margin = width - n;
  int64_t left = side == 'l' ? 0 : side == 'r' ? margin : margin / 2 + (margin & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < margin - left; ++i) out += fill;
  return out;
}

// str.format with {}, {0}, {name}, {{ }}; conversions !s/!r; no format specs.
std::string py_format(const std::string& fmt, CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}')
        ++i;
      else
        render_fail("single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) render_fail("single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 's';
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 's';
      field = field.substr(0, bang);
    }
    if (field.find(':') != std::string::npos) render_fail("format specs in str.format() are not supported");
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t index = field.empty() ? auto_index++ : size_t(std::stoul(field));
      if (index >= a.positional.size())
        render_fail("Replacement index " + std::to_string(index) + " out of range for positional args tuple");
      v = &a.positional[index];
    } else {
      for (const auto& [k, x] : a.keyword)
        if (k == field) v = &x;
      if (!v) render_fail("format() has no keyword argument '" + field + "'");
    }
    out += conversion == 'r' ? repr(*v) : to_str(*v);
    check_bytes(out.size(), "str.format() result");
  }
  return out;
}

Value string_method(const std::string& s, std::string_view name, CallArgs& a, Renderer& r) {
  if (name == "startswith" || name == "endswith") {
    BoundArgs args(name, a, {"prefix", "start", "end"});
    return Value::boolean(affix_match(s, args.required(0), args.get(1), args.get(2), name == "startswith"));
  }
  if (name == "split" || name == "rsplit") {
    BoundArgs args(name, a, {"sep", "maxsplit"});
    return string_list(py_split(s, opt_str(args.get(0)), int_or(args.get(1), -1), name == "rsplit"));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    BoundArgs args(name, a, {"chars"});
    return Value::string(py_strip(s, opt_str(args.get(0)), name != "rstrip", name != "lstrip"));
  }
  if (name == "replace") {
    BoundArgs args(name, a, {"old", "new", "count"});
    std::string out = py_replace(s, str_arg(args.required(0), "replace"), str_arg(args.required(1), "replace"),
                                 int_or(args.get(2), -1));
    r.check_size(out.size());
    return Value::string(std::move(out));
  }
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower") return Value::string(py_lower(s));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    BoundArgs args(name, a, {"sub"});
    int64_t at = py_find(s, str_arg(args.required(0), "find"), name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) render_fail("substring not found");
    return Value::integer(at);
  }
  if (name == "count") {
    BoundArgs args(name, a, {"sub"});
    return Value::integer(py_count(s, str_arg(args.required(0), "count")));
  }
  if (name == "format") {
    std::string out = py_format(s, a);
    r.check_size(out.size());
    return Value::string(std::move(out));
  }
  if (name == "join") {
    BoundArgs args(name, a, {"iterable"});
    std::string out;
    bool first = true;
    for (const Value& item : iterate(args.required(0))) {
      if (!first) out += s;
      first = false;
      out += str_arg(item, "join");
      r.check_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "splitlines") return string_list(py_splitlines(s));
  if (name == "partition" || name == "rpartition") {
    BoundArgs args(name, a, {"sep"});
    const std::string& sep = str_arg(args.required(0), "partition");
    if (sep.empty()) render_fail("empty separator");
    size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos)
      return name == "partition" ? Value::tuple({Value::string(s), Value::string(""), Value::string("")})
                                 : Value::tuple({Value::string(""), Value::string(""), Value::string(s)});
    return Value::tuple({Value::string(s.substr(0, at)), Value::string(sep), Value::string(s.substr(at + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    BoundArgs args(name, a, {"affix"});
    const std::string& x = str_arg(args.required(0), std::string(name).c_str());
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value::string(s.substr(x.size()));
    if (name == "removesuffix" && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0 &&
        !x.empty())
      return Value::string(s.substr(0, s.size() - x.size()));
    return Value::string(s);
  }
  if (name == "ljust" || name == "rjust" || name == "center") {
    BoundArgs args(name, a, {"width", "fillchar"});
    return Value::string(pad(s, &args.required(0), args.get(1), name == "ljust" ? 'l' : name == "rjust" ? 'r' : 'c'));
  }
  if (name == "zfill") {
    BoundArgs args(name, a, {"width"});
    int64_t width = int_or(&args.required(0), 0);
    std::u32string text = utf8_decode(s);
    if (width <= int64_t(text.size())) return Value::string(s);
    check_bytes(size_t(width), "the zfill() result");
    size_t sign = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
    text.insert(sign, size_t(width) - text.size(), U'0');
    return Value::string(utf8_encode(text));
  }
  // is* predicates: non-empty and every character qualifies.
  auto all_chars = [&](auto pred) {
    std::u32string text = utf8_decode(s);
    return Value::boolean(!text.empty() && std::all_of(text.begin(), text.end(), pred));
  };
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric")
    return all_chars([](char32_t c) { return c >= '0' && c <= '9'; });
  if (name == "isalpha")
    return all_chars(
        [](char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0xc0 && !py_isspace(c)); });
  if (name == "isalnum")
    return all_chars([](char32_t c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             (c >= 0xc0 && !py_isspace(c));
    });
  if (name == "isspace") return all_chars(py_isspace);
  if (name == "islower") return Value::boolean(py_islower(s));
  if (name == "isupper") return Value::boolean(py_isupper(s));
  render_fail("str has no method '" + std::string(name) + "'");
}

bool is_string_method(std::string_view name) {
  static const std::string_view names[] = {
      "startswith", "endswith", "split",   "rsplit",     "strip",     "lstrip",     "rstrip",       "replace",
      "upper",      "lower",    "title",   "capitalize", "find",      "rfind",      "index",        "rindex",
      "count",      "format",   "join",    "splitlines", "partition", "rpartition", "removeprefix", "removesuffix",
      "ljust",      "rjust",    "center",  "zfill",      "isdigit",   "isdecimal",  "isnumeric",    "isalpha",
      "isalnum",    "isspace",  "islower", "isupper"};
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Value dict_method(const Value& d, std::string_view name, CallArgs& a) {
  const Dict& dict = d.as_dict();
  if (name == "get") {
    BoundArgs args("get", a, {"key", "default"});
    if (const Value* v = dict.find(args.required(0))) return *v;
    return args.get_or(1, Value::none());
  }
  BoundArgs args(name, a, {});
  std::vector<Value> out;
  out.reserve(dict.entries.size());
  for (const auto& [k, v] : dict.entries)
    out.push_back(name == "keys" ? k : name == "values" ? v : Value::tuple({k, v}));
  return Value::list(std::move(out));
}

Value list_method(const Value& list, std::string_view name, CallArgs& a) {
  BoundArgs args(name, a, {"value"});
  const auto& items = list.items();
  if (name == "count")
    return Value::integer(
        std::count_if(items.begin(), items.end(), [&](const Value& x) { return equal(x, args.required(0)); }));
  for (size_t i = 0; i < items.size(); ++i)
    if (equal(items[i], args.required(0))) return Value::integer(int64_t(i));
  render_fail(repr(args.required(0)) + " is not in list");
}

// ---- globals ----

Value g_range(Renderer& r, CallArgs& a) {
  if (!a.keyword.empty()) render_fail("range() takes no keyword arguments");
  std::vector<int64_t> n;
  for (const Value& v : a.positional) {
    if (!v.is_int() && !v.is_bool())
      render_fail("range() arguments must be integers, got " + std::string(v.type_name()));
    n.push_back(v.as_int());
  }
  if (n.empty() || n.size() > 3) render_fail("range() expects 1 to 3 arguments, got " + std::to_string(n.size()));
  int64_t start = n.size() == 1 ? 0 : n[0], stop = n.size() == 1 ? n[0] : n[1], step = n.size() == 3 ? n[2] : 1;
  if (step == 0) render_fail("range() arg 3 must not be zero");
  // Length computed in wider arithmetic so extreme bounds cannot overflow.
  __int128 span = step > 0 ? (__int128(stop) - start + step - 1) / step : (__int128(start) - stop - step - 1) / -step;
  if (span < 0) span = 0;
  if (span > r.limits().max_loop_iterations)
    render_fail("range() of " + std::to_string(int64_t(span)) + " items exceeds the iteration limit (" +
                std::to_string(r.limits().max_loop_iterations) + ")");
  std::vector<Value> items;
  items.reserve(size_t(span));
  for (int64_t i = 0; i < int64_t(span); ++i) items.push_back(Value::integer(start + i * step));
  return Value::list(std::move(items));
}

Dict dict_from_args(CallArgs& a, const char* fn) {
  Dict d;
  if (a.positional.size() > 1) render_fail(std::string(fn) + "() takes at most one positional argument");
  if (!a.positional.empty()) {
    const Value& init = a.positional[0];
    if (init.is_dict())
      d = init.as_dict();
    else
      for (const Value& pair : iterate(init)) {
        if (!pair.is_sequence() || pair.items().size() != 2)
          render_fail(std::string(fn) + "() sequence elements must be pairs");
        d.set(pair.items()[0], pair.items()[1]);
      }
  }
  for (auto& [k, v] : a.keyword) d.set(Value::string(k), v);
  return d;
}

Value g_namespace(Renderer& r, CallArgs& a) {
  Value ns = Value::make_namespace(dict_from_args(a, "namespace"));
  r.track_namespace(ns);
  return ns;
}
Value g_dict(Renderer&, CallArgs& a) { return Value::dict(dict_from_args(a, "dict")); }

Value g_raise_exception(Renderer&, CallArgs& a) {
  std::string message = a.positional.empty() ? "" : to_str(a.positional[0]);
  render_fail("raise_exception: " + message);
}

// transformers' strftime_now: datetime.now().strftime(format), local time.
Value g_strftime_now(Renderer&, CallArgs& a) {
  BoundArgs args("strftime_now", a, {"format"});
  std::string fmt = to_str(args.required(0));
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  char buf[512];
  size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &local);
  if (n == 0 && !fmt.empty()) render_fail("strftime_now: format produced no output or is too long");
  return Value::string(std::string(buf, n));
}

}  // namespace

Value find_method(const Value& obj, std::string_view name) {
  if (obj.is_string() && is_string_method(name)) {
    std::string s = obj.as_string();
    std::string method(name);
    return Value::callable("str." + method,
                           [s, method](Renderer& r, CallArgs& a) { return string_method(s, method, a, r); });
  }
  if (obj.is_dict() && (name == "get" || name == "items" || name == "keys" || name == "values")) {
    std::string method(name);
    return Value::callable("dict." + method,
                           [obj, method](Renderer&, CallArgs& a) { return dict_method(obj, method, a); });
  }
  if (obj.is_sequence() && (name == "count" || name == "index")) {
    std::string method(name);
    return Value::callable("list." + method,
                           [obj, method](Renderer&, CallArgs& a) { return list_method(obj, method, a); });
  }
  return Value();
}

Value find_global(std::string_view name) {
  using Fn = Value (*)(Renderer&, CallArgs&);
  static const std::pair<std::string_view, Fn> globals[] = {
      {"range", g_range},
      {"namespace", g_namespace},
      {"dict", g_dict},
      {"raise_exception", g_raise_exception},
      {"strftime_now", g_strftime_now},
  };
  for (const auto& [n, fn] : globals)
    if (n == name) return Value::callable(std::string(n), fn);
  return Value();
}

}  // namespace brioche::tmpl
