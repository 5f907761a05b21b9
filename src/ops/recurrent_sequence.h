// A sequence's rows in a ragged batch and the state slot its recurrent ops
// read and write (Qwen 3.5's Gated DeltaNet layers: ops/causal_conv1d.h,
// ops/gated_delta_rule.h).
#pragma once

#include <cstdint>
#include <span>

namespace brioche::ops {

// A copy of a sequence's state, taken inside a forward: after the rows
// before `position` (first_position <= position <= first_position +
// n_rows), the state is copied into `slot` (another slot of the same
// state tensors). The rows are cut there as at a split (below), so a
// position inside a delta-rule chunk changes the results after it: callers
// keep to multiples of kDeltaRuleChunk or to positions in `splits`.
struct StateCheckpoint {
  int32_t position = 0;
  int32_t slot = 0;
};

struct RecurrentSequence {
  int32_t first_row = 0;   // first batch row of the sequence
  int32_t n_rows = 0;      // its consecutive rows, in position order
  int32_t state_slot = 0;  // its slot in the state tensors
  // The sequence starts here (n_past 0): the slot's old contents are ignored
  // and the rows start from a zero state.
  bool starts = false;
  int32_t first_position = 0;  // position of its first row (n_past): chunks of the delta rule align to it
  // Positions (ascending, inside (first_position, first_position + n_rows))
  // where the rows are cut as if an earlier forward had ended there: the
  // delta rule's pieces end at them besides the chunk grid, so one forward
  // reproduces exactly the state of several (a preempted sequence's
  // recompute, engine/scheduler.cpp). A piece of one row takes the
  // recurrent form, as a decode step does.
  std::span<const int32_t> splits;
  std::span<const StateCheckpoint> checkpoints;  // ascending positions
};

// Checks each sequence's splits and checkpoints (ascending, inside its
// rows; checkpoint slots in [0, n_slots), none a slot a sequence of the
// batch runs in); throws brioche::Error "<op>: ..." naming the sequence.
void check_splits_and_checkpoints(std::span<const RecurrentSequence> sequences, int64_t n_slots, const char* op);

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
