// Pieces of the JSON Schema front end that are plain languages: integer and
// number ranges as decimal text, and string formats.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace brioche::grammar {

// EBNF expression for canonical decimal integers n with lo <= n <= hi
// (no leading zeros, no "-0"); a missing bound is unbounded.
std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

// EBNF expression for JSON numbers without exponent, `-?int(.frac)?`, whose
// value lies within the bounds (integer-valued bounds, possibly exclusive).
struct NumberBound {
  bool present = false;
  double value = 0;
  bool exclusive = false;
};
std::string number_range(const NumberBound& lo, const NumberBound& hi);

// EBNF expression for the content (between the quotes) of a JSON string in
// `format`; empty when the format is not supported.
std::string format_ebnf(const std::string& format);
std::string supported_formats();

}  // namespace brioche::grammar
