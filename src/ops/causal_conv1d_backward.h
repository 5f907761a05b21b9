// Backward of ops::causal_conv1d_silu for LoRA training (Qwen 3.5's short
// convolution in front of the delta rule), over whole sequences (each
// starts at zero inputs; the frozen kernel gets no gradient):
//   p[t, c]  = Σ_{j<K} w[c, j] · x[t − (K−1) + j, c]     (x before the sequence: 0)
//   out      = silu(p)
//   dp       = dout · σ(p)·(1 + p·(1 − σ(p)))
//   dx[s, c] = Σ_{j<K} w[c, j] · dp[s + (K−1) − j, c]    (rows of the same sequence only)
#pragma once

#include <span>

#include "core/tensor.h"
#include "ops/recurrent_sequence.h"

namespace brioche::ops {

//   x      : f32 [n_rows, channels]  the forward's inputs (rows may be strided)
//   weight : f32 [channels, K]
//   dout   : f32 [n_rows, channels]  d loss / d out
//   dx     : f32 [n_rows, channels]  written (=); rows in no sequence get 0
// Every sequence must start (starts = true). CPU only.
void causal_conv1d_silu_backward(const Tensor& x, const Tensor& weight, std::span<const RecurrentSequence> sequences,
                                 const Tensor& dout, Tensor& dx);

}  // namespace brioche::ops
