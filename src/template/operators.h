// Expression operators with Python semantics: attribute and item access as
// Jinja's sandbox resolves them, slicing, arithmetic and membership.
#pragma once

#include <optional>
#include <string_view>

#include "template/value.h"

namespace brioche::tmpl {

// Fails (with the Undefined's hint) when v is Undefined: using an undefined
// value in arithmetic, as a container or as an attribute owner is an error.
void require_defined(const Value& v);

Value get_attribute(const Value& obj, std::string_view name);  // obj.name
Value get_item(const Value& obj, const Value& key);            // obj[key]
Value slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop, std::optional<int64_t> step);
// op in + - * / // % ** ~ ; max_bytes bounds string/list repetition.
Value binary_op(std::string_view op, const Value& a, const Value& b, size_t max_bytes);
bool contains(const Value& container, const Value& item);  // item in container

}  // namespace brioche::tmpl
