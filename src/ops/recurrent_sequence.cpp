#include "ops/recurrent_sequence.h"

#include "core/error.h"

namespace brioche::ops {

void check_splits_and_checkpoints(std::span<const RecurrentSequence> sequences, int64_t n_slots, const char* op) {
  for (size_t i = 0; i < sequences.size(); ++i) {
    const RecurrentSequence& s = sequences[i];
    const int64_t first = s.first_position, end = first + s.n_rows;
    int64_t last = first;
    for (int32_t split : s.splits) {
      BRIOCHE_CHECK(split > last && split < end, op, ": sequence ", i, " has split ", split,
                    ", expected ascending positions inside (", first, ", ", end, ")");
      last = split;
    }
    last = first - 1;
    for (const StateCheckpoint& cp : s.checkpoints) {
      BRIOCHE_CHECK(cp.position > last && cp.position <= end, op, ": sequence ", i, " has a checkpoint at ",
                    cp.position, ", expected ascending positions in [", first, ", ", end, "]");
      BRIOCHE_CHECK(cp.slot >= 0 && cp.slot < n_slots, op, ": sequence ", i, " checkpoints into slot ", cp.slot,
                    ", outside [0, ", n_slots, ")");
      for (const RecurrentSequence& other : sequences)
        BRIOCHE_CHECK(other.state_slot != cp.slot, op, ": sequence ", i, " checkpoints into slot ", cp.slot,
                      ", which a sequence of the batch runs in");
      last = cp.position;
    }
  }
}

}  // namespace brioche::ops
