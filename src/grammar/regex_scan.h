// Scanning a regex pattern's text without parsing it (top-level branches,
// group depth): where a character class ends.
#pragma once

#include <algorithm>
#include <string>

namespace brioche::grammar {

// The index of the ']' that closes the class whose '[' is at p[open], or
// p.size() when none does: a '^' right after '[' negates, a ']' right
// after that is a literal (`[]a]`, `[^]a]`), and '\' escapes the next
// character.
inline size_t regex_class_end(const std::string& p, size_t open) {
  size_t i = open + 1;
  if (i < p.size() && p[i] == '^') ++i;
  if (i < p.size() && p[i] == ']') ++i;
  for (; i < p.size() && p[i] != ']'; ++i)
    if (p[i] == '\\') ++i;
  return std::min(i, p.size());
}

}  // namespace brioche::grammar
