// What became of every row of an input file: kept, or dropped for a named
// reason (nothing is dropped without one). Bad rows (not JSON, wrong shape,
// another layout) keep their message; every dropped row keeps its location.
//
// Reasons:
//   invalid_json         the line is not JSON                                   (bad row)
//   bad_row              the row lacks what its layout needs / unknown layout    (bad row)
//   other_kind           a row of another kind than the file's (sft vs preference vs rated) (bad row)
//   too_few_completions  fewer than two completions with a score and text   (curate)
//   tie                  no completion rated below the best                  (curate)
//   gap_below_min        best − rejected score below --min-gap               (curate)
//   empty_reply          a chosen/rejected/reply with no text                (curate, convert)
//   length_ratio         longer/shorter reply (characters) above --max-length-ratio (curate)
//   too_long             prompt + longest reply above --max-tokens            (curate, convert)
//   duplicate_prompt     a prompt already kept from an earlier row           (curate, convert --dedup)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/source_rows.h"

namespace brioche::data {

bool is_bad_row_reason(const std::string& reason);

struct DroppedRow {
  RowLocation at;
  std::string reason;
  std::string message;  // what was expected and what was found
};

class RowReport {
 public:
  void keep() { ++rows_, ++kept_; }
  void drop(DroppedRow row);

  int64_t rows() const { return rows_; }
  int64_t kept() const { return kept_; }
  int64_t dropped() const { return rows_ - kept_; }
  int64_t count(const std::string& reason) const;
  int64_t bad_rows() const;
  const std::vector<DroppedRow>& dropped_rows() const { return dropped_; }

  // {"rows", "kept", "dropped": {reason: count}, "bad_rows": [{"line"|"item", "reason", "message"}],
  //  "dropped_at": {reason: [line, ...]}}
  json to_json() const;
  // Lines for the terminal: counts per reason, then up to `max_listed` bad rows.
  std::string summary(int max_listed = 10) const;

 private:
  int64_t rows_ = 0, kept_ = 0;
  std::vector<std::pair<std::string, int64_t>> counts_;  // by first occurrence
  std::vector<DroppedRow> dropped_;
};

}  // namespace brioche::data
