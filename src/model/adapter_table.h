// A batch's LoRA adapters as data on the device (ops::lora_table_shrink and ops::LoraTerms): one
// block of i32 words, uploaded before each forward that has adapter rows,
//
//   row_slot [rows, padded to even]      the row's adapter slot, −1 for the base
//   factors  [slots][n_layers][7]        backend::cpu::LoraFactors (6 words each)
//
// Slots are the batch's distinct adapters in row order: at most one per
// sequence (a decode graph's block has one per row; an eager step's, one per
// sequence, so a long prefill uploads a small table). A decode graph records its launches against a block at a fixed
// address and replays them with whatever mix the step uploads, so a new mix
// of adapters needs no new graph; only a larger rank does (rank_cap, a
// power of two, is in the graph's key).
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "model/forward_batch.h"
#include "ops/lora_rows.h"

namespace brioche::model {

// Words of a block for `rows` rows and `slots` adapters of an n_layers model.
size_t adapter_table_words(int32_t rows, int32_t slots, int32_t n_layers);

// The rank the kernels are sized for: 0 without adapters, else the largest
// adapter rank of the batch rounded up to a power of two (at least 8).
int32_t adapter_rank_cap(const ForwardBatch& batch);

// Fills `words` (adapter_table_words(rows, slots, n_layers) of them) for
// the batch (rows ≥ its rows; the rest are padding, slot −1; slots ≥ its
// distinct adapters). Fails, naming the adapter, when its factors are not
// f16 matrices on the CUDA device or its layers are not the model's.
void fill_adapter_table(const ForwardBatch& batch, int32_t rows, int32_t slots, int32_t n_layers,
                        std::span<int32_t> words);

// Device views over a filled block, and the shrink's scratch, as the
// adapted blocks take them (model/blocks.h LayerLora::table).
struct AdapterTable {
  Tensor row_slot;  // i32 [rows]
  Tensor factors;   // i32 words
  int32_t slot_stride = 0;
  int32_t rank_cap = 0;
  Tensor u;  // f32 [rows, 3 · rank_cap]

  ops::LoraTable table() const {
    return {.row_slot = &row_slot, .factors = &factors, .slot_stride = slot_stride, .rank_cap = rank_cap};
  }
};
// Views of `block` (i32 [adapter_table_words(rows, slots, n_layers)] on
// the device) and `u` (f32 [rows, ≥ 3 · rank_cap]).
AdapterTable adapter_table_views(const Tensor& block, int32_t rows, int32_t slots, int32_t n_layers, int32_t rank_cap,
                                 const Tensor& u);

}  // namespace brioche::model
