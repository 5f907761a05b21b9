#include "model/forward_batch.h"

#include "core/error.h"

namespace brioche::model {

void check_batch_rows(const ForwardBatch& batch, int vocab_size) {
  const int32_t n = batch.n_rows();
  BRIOCHE_CHECK(batch.positions.size() == size_t(n) && batch.wants_logits.size() == size_t(n), "forward: batch has ", n,
                " tokens, ", batch.positions.size(), " positions and ", batch.wants_logits.size(),
                " wants_logits entries (expected equal)");
  std::vector<uint8_t> covered(size_t(n), 0);
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceView& seq = batch.sequences[s];
    BRIOCHE_CHECK(seq.first_row >= 0 && seq.n_rows >= 0 && seq.first_row + seq.n_rows <= n, "forward: sequence ", s,
                  " rows [", seq.first_row, ", ", seq.first_row + seq.n_rows, ") outside the batch of ", n, " rows");
    for (int32_t i = 0; i < seq.n_rows; ++i) {
      const int32_t r = seq.first_row + i;
      BRIOCHE_CHECK(!covered[size_t(r)], "forward: row ", r, " belongs to two sequences");
      covered[size_t(r)] = 1;
      BRIOCHE_CHECK(batch.positions[size_t(r)] == seq.n_past + i, "forward: row ", r, " of sequence ", s,
                    " has position ", batch.positions[size_t(r)], ", expected n_past + ", i, " = ", seq.n_past + i);
    }
  }
  for (int32_t r = 0; r < n; ++r) {
    BRIOCHE_CHECK(covered[size_t(r)], "forward: row ", r, " belongs to no sequence");
    BRIOCHE_CHECK(batch.tokens[size_t(r)] >= 0 && batch.tokens[size_t(r)] < vocab_size, "forward: token ",
                  batch.tokens[size_t(r)], " at row ", r, " is outside the vocabulary of ", vocab_size);
  }
}

}  // namespace brioche::model
