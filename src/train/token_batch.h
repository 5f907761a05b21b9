// A training batch: the rows of several sequences laid end to end (no
// padding), each sequence attending only to itself, plus the tokens whose
// log-probabilities the loss reads.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/attention_backward.h"

namespace brioche::train {

// Token `target` scored from the hidden state of row `row` (the row before it
// in its branch). `sequence` indexes the logical sequences of the batch (for
// preference data: 2·pair = chosen, 2·pair + 1 = rejected).
struct ScoredToken {
  int32_t row = 0;
  int32_t target = 0;
  int32_t sequence = 0;
  bool response = true;  // false: a prompt token (scored only by sft_scope=full NLL)
};

struct TokenBatch {
  std::vector<int32_t> tokens;            // [n_rows]
  std::vector<int32_t> positions;         // [n_rows] RoPE positions
  std::vector<uint8_t> branch;            // [n_rows] 0 shared, 1 chosen, 2 rejected (prefix-shared rows)
  std::vector<ops::AttentionSpan> spans;  // one per forward sequence
  std::vector<ScoredToken> scored;
  int n_sequences = 0;  // logical sequences (see ScoredToken::sequence)

  int64_t n_rows() const { return int64_t(tokens.size()); }
  ops::DenseAttentionLayout layout() const { return {.spans = spans, .branch = branch, .positions = positions}; }
};

}  // namespace brioche::train
