// `brioche data inspect`: what a dataset file holds. Layouts and their row
// counts, bad rows by location, prompt and reply lengths in characters,
// ratings of rated completions, and with a model the token length of every
// row as `brioche train` measures it (prompt + its longest reply, through
// the model's chat template: token_counter.h) with a histogram.
//
// Distributions report n, min, mean, p50, p90, p99 and max; a percentile is
// the nearest rank (the value at position ceil(p·n) of the sorted values).
// The histogram's bins are powers of two, [2^k, 2^(k+1)), from the one
// holding the shortest row to the one holding the longest (the first bin
// starts at 0 when the shortest row is under 8 tokens).
#pragma once

#include <vector>

#include "data/read_examples.h"
#include "data/token_counter.h"

namespace brioche::data {

struct InspectOptions {
  ReadOptions read;
  TokenCounter* counter = nullptr;
  std::vector<int64_t> limits = {512, 1024, 2048, 4096};  // rows over each are counted
};

// {"file", "kind", "layouts", rows/kept/dropped/bad_rows (row_report.h), "prompt_chars", "reply_chars",
//  "replies_per_row", "scores", "tokens": {distribution, "histogram": [{"from", "to", "rows"}], "over": {...}}}
json inspect(const std::string& path, const InspectOptions& options);

// The stats as lines for the terminal.
std::string inspect_text(const json& stats);

// n, min, mean, p50, p90, p99, max of values (an empty object when there are none).
json distribution(std::vector<double> values);

// Power-of-two histogram of token lengths (see above).
json length_histogram(const std::vector<int64_t>& lengths);

}  // namespace brioche::data
