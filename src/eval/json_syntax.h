// Whether Python's json.loads(text) accepts the text: RFC 8259 JSON plus
// Python's extensions NaN, Infinity and -Infinity, any number size, lone
// surrogate escapes; no control characters inside strings (strict mode).
#pragma once

#include <string_view>

namespace brioche::eval {

bool python_json_loads_ok(std::string_view text);

}  // namespace brioche::eval
