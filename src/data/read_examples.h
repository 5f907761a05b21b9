// Reads a dataset file into Examples, dropping (with a reason and the row's
// location) what cannot be read: invalid JSON, rows no layout rule matches
// or that lack what their layout needs, and rows of another kind than the
// file's (the first readable row sets it: a file `brioche train` reads is all
// sft or all preference). With strict, the first bad row is an error.
#pragma once

#include <functional>
#include <optional>

#include "data/example.h"
#include "data/row_report.h"

namespace brioche::data {

struct ReadOptions {
  std::optional<Layout> layout;  // --from: every row is read as this layout; else detected per row
  ScoreOptions scores;
  bool strict = false;
  // Called with the rows read so far every 1,000 rows, and with -1 at the end (a
  // terminal's progress line for big files measured through a tokenizer).
  std::function<void(int64_t rows)> progress;
};

// visit decides what happens to each readable row: it calls report.keep()
// or report.drop(). A RowError it throws (before either) drops the row as bad_row. Returns the file's kind (nullopt: no readable row).
std::optional<RowKind> read_examples(const std::string& path, const ReadOptions& options, RowReport& report,
                                     const std::function<void(const RowLocation&, Example&)>& visit);

// Drops a row into the report, or with strict fails with path, location and message.
void drop_row(RowReport& report, const std::string& path, bool strict, DroppedRow row);

}  // namespace brioche::data
