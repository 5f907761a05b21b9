// A sequence's rows in a ragged batch and the state slot its recurrent ops
// read and write (Qwen 3.5's Gated DeltaNet layers: ops/causal_conv1d.h,
// ops/gated_delta_rule.h).
#pragma once

#include <cstdint>

namespace brioche::ops {

struct RecurrentSequence {
  int32_t first_row = 0;   // first batch row of the sequence
  int32_t n_rows = 0;      // its consecutive rows, in position order
  int32_t state_slot = 0;  // its slot in the state tensors
  // The sequence starts here (n_past 0): the slot's old contents are ignored
  // and the rows start from a zero state.
  bool starts = false;
  int32_t first_position = 0;  // position of its first row (n_past): chunks of the delta rule align to it
};

// Rows per chunk of the gated delta rule's chunked form (ops/gated_delta_rule.h).
// Chunks cover positions [j·kDeltaRuleChunk, (j+1)·kDeltaRuleChunk): how a
// sequence's rows are split into forwards changes no result as long as the
// splits fall on multiples of it (the engine's prefill chunks of hybrid
// models do; docs/model.md "Qwen 3.5"). Chosen by measurement
// (bench/delta_rule_bench.cpp, 512 rows of 32 heads of 128 × 128 on 2
// cores, median wall ms: recurrent 308, chunks of 8: 230, 16: 224, 32: 287,
// 64: 317, 128: 484; on the CPU both forms do ~4·dk·dv FMAs a row, and
// larger chunks leave L1): 16, which is also the engine's block size, so
// hybrid prefix reuse keeps a state at every block boundary it needs.
inline constexpr int32_t kDeltaRuleChunk = 16;

}  // namespace brioche::ops
