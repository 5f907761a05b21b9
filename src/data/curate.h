// `brioche data curate`: preference pairs from rated completions
// (UltraFeedback rows, or the binarized chosen/rejected-with-scores layout).
//
// Per row, in this order (each drop counted under its reason, row_report.h):
//   1. candidates: completions with a score and non-blank text; fewer than two → too_few_completions
//   2. chosen: the best score (the first of equals); rejected: the worst (first of equals), or with
//      best-vs-random a uniformly random candidate rated strictly below the best, drawn from a
//      xoshiro256** seeded by (seed, row location) so a row's draw does not depend on other rows;
//      no candidate below the best → tie
//   3. chosen − rejected < min_gap → gap_below_min
//   4. longer/shorter reply length in characters (UTF-8 code points) > max_length_ratio → length_ratio
//   5. prompt + longer reply > max_tokens, measured as `brioche train` does (token_counter.h) → too_long
//   6. a prompt already kept (train_rows.h prompt_key) → duplicate_prompt: the first row of each prompt
//      that passes 1-5 is kept
// then the kept pairs are split train/valid (split.h).
#pragma once

#include <cstdint>
#include <string>

#include "data/read_examples.h"
#include "data/split.h"
#include "data/token_counter.h"

namespace brioche::data {

enum class PairSelection : uint8_t { BestVsWorst, BestVsRandom };

struct CurateOptions {
  PairSelection selection = PairSelection::BestVsWorst;
  uint64_t seed = 0;
  double min_gap = 0.0;           // chosen − rejected at least this (a tie never makes a pair)
  double max_length_ratio = 0.0;  // 0 = no limit
  bool dedup = true;
  int64_t max_tokens = 0;  // 0 = no limit; needs counter
  TokenCounter* counter = nullptr;
  double valid_fraction = 0.0;
  ReadOptions read;
};

struct CurateResult {
  SplitRows rows;  // {prompt, chosen, rejected, score_chosen, score_rejected}
  RowReport report;
  json stats;  // report + options + split + score and length summaries
};

CurateResult curate(const std::string& path, const CurateOptions& options);

std::string selection_name(PairSelection s);  // "best-vs-worst" | "best-vs-random"

// Code points of UTF-8 text (bytes that do not start a continuation).
int64_t utf8_length(const std::string& text);

}  // namespace brioche::data
