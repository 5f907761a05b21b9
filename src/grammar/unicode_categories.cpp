// Unicode general categories: the generated table and ECMA-262's names.

#include "grammar/unicode_categories.h"

#include <algorithm>
#include <map>

namespace brioche::grammar {
namespace {

#include "grammar/unicode_categories.inc"

// ECMA-262's General_Category value aliases (PropertyValueAliases.txt).
const std::map<std::string, std::string>& long_names() {
  static const std::map<std::string, std::string> kNames = {
      {"Letter", "L"},
      {"Cased_Letter", "LC"},
      {"Uppercase_Letter", "Lu"},
      {"Lowercase_Letter", "Ll"},
      {"Titlecase_Letter", "Lt"},
      {"Modifier_Letter", "Lm"},
      {"Other_Letter", "Lo"},
      {"Mark", "M"},
      {"Combining_Mark", "M"},
      {"Nonspacing_Mark", "Mn"},
      {"Spacing_Mark", "Mc"},
      {"Enclosing_Mark", "Me"},
      {"Number", "N"},
      {"Decimal_Number", "Nd"},
      {"digit", "Nd"},
      {"Letter_Number", "Nl"},
      {"Other_Number", "No"},
      {"Punctuation", "P"},
      {"punct", "P"},
      {"Connector_Punctuation", "Pc"},
      {"Dash_Punctuation", "Pd"},
      {"Open_Punctuation", "Ps"},
      {"Close_Punctuation", "Pe"},
      {"Initial_Punctuation", "Pi"},
      {"Final_Punctuation", "Pf"},
      {"Other_Punctuation", "Po"},
      {"Symbol", "S"},
      {"Math_Symbol", "Sm"},
      {"Currency_Symbol", "Sc"},
      {"Modifier_Symbol", "Sk"},
      {"Other_Symbol", "So"},
      {"Separator", "Z"},
      {"Space_Separator", "Zs"},
      {"Line_Separator", "Zl"},
      {"Paragraph_Separator", "Zp"},
      {"Other", "C"},
      {"Control", "Cc"},
      {"cntrl", "Cc"},
      {"Format", "Cf"},
      {"Surrogate", "Cs"},
      {"Private_Use", "Co"},
      {"Unassigned", "Cn"},
  };
  return kNames;
}

}  // namespace

bool unicode_category_ranges(const std::string& name_in, std::vector<std::pair<uint32_t, uint32_t>>& out) {
  // \p{Print}: no Unicode property (nor one of ECMA-262 or Python's re), but
  // Java's POSIX class, which CloudFormation's schemas are written for:
  // printable ASCII, U+0020..U+007E. (The `regex` module reads it as every
  // printable character; ASCII is what both admit.)
  if (name_in == "Print") {
    out = {{0x20, 0x7E}};
    return true;
  }
  std::string name = name_in;
  for (const char* prefix : {"gc=", "General_Category="})
    if (name.rfind(prefix, 0) == 0) name = name.substr(std::string(prefix).size());
  if (auto it = long_names().find(name); it != long_names().end()) name = it->second;
  // A one-letter group is every category that starts with it; LC is Lu, Ll, Lt.
  auto wanted = [&](const char* category) {
    if (name == "LC")
      return std::string(category) == "Lu" || std::string(category) == "Ll" || std::string(category) == "Lt";
    if (name.size() == 1) return category[0] == name[0];
    return name == category;
  };
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  for (const CategoryRange& r : kCategoryRanges)
    if (wanted(r.category)) ranges.emplace_back(r.lo, r.hi);
  if (ranges.empty()) return false;
  std::sort(ranges.begin(), ranges.end());
  out.clear();
  for (auto [lo, hi] : ranges) {
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.emplace_back(lo, hi);
  }
  return true;
}

const char* unicode_category_version() { return kCategoryUnicodeVersion; }

}  // namespace brioche::grammar
