// The names templates can call: filters (`x | trim`), tests (`x is string`),
// methods of str/dict values (`s.startswith('a')`, `d.items()`) and globals
// (range, namespace, dict, raise_exception, strftime_now).
#pragma once

#include <initializer_list>
#include <string_view>
#include <vector>

#include "template/value.h"

namespace brioche::tmpl {

using FilterFn = Value (*)(Renderer&, const Value& input, CallArgs& args);
using TestFn = bool (*)(Renderer&, const Value& input, CallArgs& args);

FilterFn find_filter(std::string_view name);  // null when unknown
TestFn find_test(std::string_view name);      // null when unknown

// `obj.name` for a built-in method of obj's type; Undefined when none.
Value find_method(const Value& obj, std::string_view name);
// A global function; Undefined when none.
Value find_global(std::string_view name);

// Python-style binding of call arguments to parameter names.
class BoundArgs {
 public:
  BoundArgs(std::string_view function, CallArgs& args, std::initializer_list<const char*> params);
  const Value* get(size_t index) const { return bound_[index]; }
  Value get_or(size_t index, Value fallback) const { return bound_[index] ? *bound_[index] : std::move(fallback); }
  const Value& required(size_t index) const;

 private:
  std::string_view function_;
  std::vector<const char*> params_;
  std::vector<const Value*> bound_;
};

}  // namespace brioche::tmpl
