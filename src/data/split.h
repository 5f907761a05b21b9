// A seeded train/valid split and the files `brioche train --data DIR` reads.
//
// The kept rows are shuffled with a seeded xoshiro256** (engine/rng.h:
// the same on any machine and standard library) by Fisher–Yates; the first
// n_valid = round(valid_fraction · n) of that order (at most n − 1) go to
// valid. Each split keeps the input order, so the files stay readable
// next to their source.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/source_rows.h"

namespace brioche::data {

struct SplitRows {
  std::vector<json> train, valid;
};

SplitRows split_rows(std::vector<json> rows, double valid_fraction, uint64_t seed);

// Writes rows as JSON Lines (UTF-8, one compact object a line).
void write_jsonl(const std::string& path, const std::vector<json>& rows);

// The output of curate/convert: `out` ending in ".jsonl" is one file (no
// valid split allowed); anything else is a directory that gets train.jsonl,
// valid.jsonl (when the split has rows) and stats.json. Files that exist
// are refused unless overwrite. Returns the paths written, stats last.
struct OutputOptions {
  std::string out;
  bool overwrite = false;
  std::string stats_path;  // "" = DIR/stats.json for a directory, no file for a .jsonl
};
std::vector<std::string> write_output(const OutputOptions& options, const SplitRows& rows, const json& stats);

// Checks `out` before any work is done (so a long curation does not end in "file exists").
void check_output(const OutputOptions& options, double valid_fraction);

}  // namespace brioche::data
