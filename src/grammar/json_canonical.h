// JSON values as uniqueItems compares them: one byte string per value, equal
// exactly when JSON Schema calls the values equal (instance equality,
// Python's `jsonschema`): objects whatever their key order (a repeated key:
// the last one counts, as Python's json keeps it), strings by their decoded
// characters (`"\u0061"` is `"a"`, a surrogate pair escape is the character),
// numbers by value with Python's rules — an integer without `.`/exponent
// exactly, any other spelling as the nearest double, so `1`, `1.0` and `1e0`
// are equal, `10000000000000000000001` and `1e22` are not — `true` never
// equal to `1`, blanks ignored.
#pragma once

#include <string>
#include <string_view>

namespace brioche::grammar {

// Appends the canonical form of the one JSON value in `text` (blanks around
// it allowed) to `out`. False when `text` is not exactly one JSON value.
// The form starts with the value's kind: 's' string, 'o' object, 'a' array,
// 'i'/'d'/'I' number (integral / other finite / infinite), 't', 'f', 'n'.
bool canonical_json(std::string_view text, std::string& out);

}  // namespace brioche::grammar
