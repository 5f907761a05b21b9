#include "data/source_rows.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace brioche::data {

std::string RowLocation::text() const { return (array_item ? "item " : "line ") + std::to_string(number); }

namespace {

// The first byte that is not whitespace (after a UTF-8 byte order mark), or 0.
char first_significant_byte(std::istream& in) {
  char bom[3] = {};
  in.read(bom, 3);
  const bool has_bom = in.gcount() == 3 && bom[0] == '\xEF' && bom[1] == '\xBB' && bom[2] == '\xBF';
  in.clear();
  in.seekg(has_bom ? 3 : 0);
  char c = 0;
  while (in.get(c)) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
      in.unget();
      return c;
    }
  }
  in.clear();
  in.seekg(has_bom ? 3 : 0);
  return 0;
}

}  // namespace

void for_each_row(const std::string& path, const std::function<void(SourceRow&)>& visit) {
  std::ifstream in(path, std::ios::binary);
  BRIOCHE_CHECK(in.good(), "cannot open ", path);
  if (first_significant_byte(in) == '[') {
    std::stringstream whole;
    whole << in.rdbuf();
    json items;
    try {
      items = json::parse(whole.str());
    } catch (const std::exception& e) {
      fail(path, ": starts with '[' but is not a valid JSON array (", e.what(), ")");
    }
    int64_t index = 0;
    for (json& item : items) {
      SourceRow row{.at = {.number = ++index, .array_item = true}, .value = std::move(item)};
      visit(row);
    }
    return;
  }
  in.clear();
  in.seekg(0);  // from the start, so line numbers count the leading blank lines too
  std::string text;
  int64_t line = 0;
  bool first = true;
  while (std::getline(in, text)) {
    ++line;
    if (first && text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
    first = false;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    SourceRow row{.at = {.number = line}};
    try {
      row.value = json::parse(text);
    } catch (const std::exception& e) {
      row.parse_error = std::string("invalid JSON: ") + e.what();
    }
    visit(row);
  }
}

}  // namespace brioche::data
