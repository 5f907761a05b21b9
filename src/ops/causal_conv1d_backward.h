// Backward of ops::causal_conv1d_silu for LoRA training (Qwen 3.5's short
// convolution in front of the delta rule; the frozen kernel gets no
// gradient). A sequence starts at zero inputs, or continues a state (its
// K−1 inputs before it: a prefix-shared branch reads its prompt's last
// rows), whose gradient is then given back:
//   p[t, c]  = Σ_{j<K} w[c, j] · x[t − (K−1) + j, c]     (x before the sequence: 0 or the state)
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
// For sequences that do not start, `state` ([n_slots, K−1, channels], as the
// forward's state) holds the inputs before them, and `d_state` (same shape)
// gets their gradient at those slots. CPU only.
struct ConvStateGrad {
  const Tensor* state = nullptr;
  Tensor* d_state = nullptr;
};
void causal_conv1d_silu_backward(const Tensor& x, const Tensor& weight, std::span<const RecurrentSequence> sequences,
                                 const Tensor& dout, Tensor& dx, const ConvStateGrad& states = {});

}  // namespace brioche::ops
