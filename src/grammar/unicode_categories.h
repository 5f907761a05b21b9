// Unicode general categories (`\p{L}`, `\p{Nd}`, `\P{M}`, `\p{gc=Letter}`)
// as code point ranges, for regexes and JSON-schema patterns. The table is
// generated from Python's unicodedata (tools/oracle/grammar_unicode_categories.py).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace brioche::grammar {

// The sorted, merged ranges of a general category named as ECMA-262 allows
// in \p{...}: a one-letter group (L, M, N, P, S, Z, C) or LC, a two-letter
// category (Lu, Nd, Zs, ...), their long names (Letter, Decimal_Number,
// punct, ...), each optionally after `gc=` or `General_Category=`. False
// for any other name (scripts, binary properties).
bool unicode_category_ranges(const std::string& name, std::vector<std::pair<uint32_t, uint32_t>>& out);

// The Unicode version of the table.
const char* unicode_category_version();

}  // namespace brioche::grammar
