// `brioche data convert`: TRL conversational preference rows, HH-RLHF
// transcripts, ShareGPT, Alpaca (and brioche's own layouts, re-validated)
// into what `brioche train` reads (train_rows.h). The layout is detected per
// row, or forced with --from; a file converts to one kind (sft examples or
// preference pairs). Rated completions (UltraFeedback) are curate's; a
// binarized row (one pair with scores) converts as a pair, scores dropped.
//
// Kept rows have a non-blank reply (preference: both), else empty_reply;
// with a counter and max_tokens, prompt + longest reply within it, else
// too_long; with dedup, the first row of each prompt, else duplicate_prompt.
#pragma once

#include "data/read_examples.h"
#include "data/split.h"
#include "data/token_counter.h"

namespace brioche::data {

struct ConvertOptions {
  ReadOptions read;
  bool dedup = false;
  int64_t max_tokens = 0;  // 0 = no limit; needs counter
  TokenCounter* counter = nullptr;
  double valid_fraction = 0.0;
  uint64_t seed = 0;
};

struct ConvertResult {
  SplitRows rows;
  RowReport report;
  json stats;  // report + layouts seen + split
};

ConvertResult convert(const std::string& path, const ConvertOptions& options);

}  // namespace brioche::data
