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
};

}  // namespace brioche::ops
