// Perplexity of a model on a text or messages file, token-weighted:
//
//   NLL = −Σ_rows Σ_t log p(token_t | tokens_<t) / Σ_rows n_row,   perplexity = e^NLL
//
// over the tokens each row scores (train/sequence_scoring.h: reply tokens,
// or every token after the first of a text row; with scope full also the
// prompt's). The 95% interval resamples rows with replacement (a seeded
// xoshiro256**, 2,000 times) and recomputes the token-weighted NLL: the
// 2.5th and 97.5th percentiles, and e^ of them for perplexity. Against a
// base on the same rows, the NLL difference gets a paired interval the same
// way (rows resampled together).
#pragma once

#include <cstdint>
#include <span>

#include <nlohmann/json.hpp>

#include "eval/preference_eval.h"

namespace brioche::eval {

struct RowLogps {
  double logp_sum = 0;  // Σ log p over the row's scored tokens
  int64_t tokens = 0;
};

struct PerplexitySummary {
  int64_t rows = 0, tokens = 0;
  MeanInterval nll;         // nats per token
  MeanInterval perplexity;  // e^ of nll's
  nlohmann::ordered_json to_json() const;
};

inline constexpr int kPerplexityResamples = 2000;
inline constexpr uint64_t kPerplexitySeed = 20240229;

PerplexitySummary summarize_perplexity(std::span<const RowLogps> rows);
// NLL(other) − NLL(base) with its paired interval.
MeanInterval compare_perplexity(std::span<const RowLogps> base, std::span<const RowLogps> other);

}  // namespace brioche::eval
