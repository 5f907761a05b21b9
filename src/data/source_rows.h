// Reading a dataset file row by row: JSON Lines (one object a line), or one
// JSON array of objects (as Alpaca's alpaca_data.json ships). Every row keeps
// where it came from ("line 12" / "item 12"), so a bad row is reported where
// the user can find it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace brioche::data {

using json = nlohmann::ordered_json;

struct RowLocation {
  int64_t number = 0;        // 1-based line (JSONL) or array index + 1 (JSON array)
  bool array_item = false;   // the file was one JSON array
  std::string text() const;  // "line 12" or "item 12"
};

// One non-blank row. parsed is null when the row is not valid JSON;
// parse_error then says why.
struct SourceRow {
  RowLocation at;
  json value;
  std::string parse_error;
};

// Calls visit for every non-blank row of `path`, in file order. Throws
// brioche::Error when the file cannot be opened, or when it starts with '['
// and is not a valid JSON array (an array is one value: it cannot be read
// past its first error).
void for_each_row(const std::string& path, const std::function<void(SourceRow&)>& visit);

}  // namespace brioche::data
