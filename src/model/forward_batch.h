// The input of one model forward: a ragged batch over many sequences.
//
// Every row is one token of some sequence. Rows of one sequence are
// consecutive and in position order; a prefilling sequence contributes many
// rows, a decoding one a single row. Each sequence owns a block table: the
// list of KV-cache blocks that hold its positions, position p living in block
// block_table[p / block_size] at offset p % block_size. The engine allocates
// blocks (and may share full blocks between sequences with equal prefixes);
// the model only reads and writes the K/V rows the tables point to.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/recurrent_sequence.h"

namespace brioche::model {

struct ServedAdapter;

struct SequenceView {
  int32_t first_row = 0;                 // index of this sequence's first row in the batch
  int32_t n_rows = 0;                    // rows of this sequence in the batch
  int32_t n_past = 0;                    // positions already in the KV cache before these rows
  std::span<const int32_t> block_table;  // covers positions [0, n_past + n_rows)
  // The window pool's table (KvCache::windowed layers; empty when the cache
  // has no window pool): as long as block_table, but only the blocks that a
  // row of this batch can read through the layers' windows are valid; the
  // entries before them are -1 (given back).
  std::span<const int32_t> window_block_table;
  const ServedAdapter* adapter = nullptr;  // the LoRA its rows run with (model/served_adapter.h); null: the base
  // Its recurrent-state slot in the KvCache (hybrid models: KvCache::
  // conv_state / recurrent_state); -1 for models without such state. The
  // slot holds the state after n_past tokens; at n_past 0 it is reset.
  int32_t state_slot = -1;
  // Hybrid models: where the recurrent state's pieces are cut besides the
  // delta rule's chunk grid, and copies of the state to take inside the
  // rows (ops::RecurrentSequence::splits, checkpoints; the engine's
  // snapshots and exact recompute).
  std::span<const int32_t> state_splits;
  std::span<const ops::StateCheckpoint> state_checkpoints;
};

struct ForwardBatch {
  std::vector<int32_t> tokens;          // [n_rows]
  std::vector<int32_t> positions;       // [n_rows] = n_past + offset within the sequence
  std::vector<uint8_t> wants_logits;    // [n_rows] 1 where the caller needs logits
  std::vector<SequenceView> sequences;  // each row belongs to exactly one sequence

  int32_t n_rows() const { return int32_t(tokens.size()); }
  int32_t n_logit_rows() const {
    int32_t n = 0;
    for (uint8_t w : wants_logits) n += w;
    return n;
  }
  bool uses_adapters() const {
    for (const SequenceView& s : sequences)
      if (s.adapter != nullptr) return true;
    return false;
  }
};

// The batch's rows as every model needs them: tokens, positions and
// wants_logits of one length; each row in exactly one sequence, inside the
// batch, at position n_past + its offset; every token in [0, vocab_size).
// Throws brioche::Error "forward: ..." naming the row or sequence.
void check_batch_rows(const ForwardBatch& batch, int vocab_size);

}  // namespace brioche::model
