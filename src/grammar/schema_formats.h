// Pieces of the JSON Schema front end that are plain languages: integer and
// number ranges as decimal text, and string formats.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

// JSON numbers without exponent whose value lies within decimal bounds
// (any number of fraction digits on both sides), as a DFA over the number's
// characters, one EBNF rule per state. Bodies refer to rule j as "{Rj}";
// rule 0 is the start. States that cannot reach an accepted number are
// dropped, so every prefix the rules admit can still be completed.
struct DecimalBound {
  bool present = false;
  bool exclusive = false;
  bool negative = false;
  std::string int_digits;   // canonical, "0" for zero magnitude
  std::string frac_digits;  // no trailing zeros
};
DecimalBound decimal_bound(double value, bool exclusive);  // shortest round-trip decimal of value
std::vector<std::string> decimal_range_rules(const DecimalBound& lo, const DecimalBound& hi);

// EBNF expression for the content (between the quotes) of a JSON string in
// `format`; empty when the format is not supported.
std::string format_ebnf(const std::string& format);
std::string supported_formats();
// The same language as a regex over the string's characters (full match),
// for a format that meets a `pattern`; empty for a format without one
// (email: its quoted local part).
std::string format_regex(const std::string& format);

}  // namespace brioche::grammar
