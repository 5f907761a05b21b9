// Causal depthwise 1-D convolution with SiLU, over a ragged batch whose
// sequences carry their last inputs in a state slot (the short convolution
// in front of Qwen 3.5's Gated DeltaNet, transformers' causal_conv1d_fn /
// causal_conv1d_update with activation "silu").
//
// For channel c of a sequence whose inputs are ..., x[t-2], x[t-1], x[t]:
//   out[t, c] = silu( Σ_{j<K} w[c, j] · x[t - (K-1) + j, c] )
// where inputs before the sequence's first token are 0 and inputs before
// this batch's rows come from the state, which afterwards holds the last
// K-1 inputs (oldest first).
#pragma once

#include <span>

#include "core/tensor.h"
#include "ops/recurrent_sequence.h"

namespace brioche::ops {

//   x      : f32 [n_rows, channels]     the inputs (rows may be strided)
//   weight : f32 [channels, K]           the depthwise kernel
//   state  : f32 [n_slots, K-1, channels] read and written per sequence slot
//   out    : f32 [n_rows, channels]      must not alias x
// Rows in no sequence are left untouched. CPU and CUDA.
void causal_conv1d_silu(const Tensor& x, const Tensor& weight, std::span<const RecurrentSequence> sequences,
                        Tensor& state, Tensor& out);

}  // namespace brioche::ops
