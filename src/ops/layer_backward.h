// Backward of the element-wise layers of the Llama block: RMSNorm, SwiGLU,
// RoPE. Activation gradients are written (=) unless the name says accumulate;
// the RMSNorm input gradient accumulates (+=) because it always lands on the
// residual stream, which already carries the skip-connection gradient.
// Each runs on its tensors' device (f32 on CPU and CUDA).
#pragma once

#include <span>

#include "core/tensor.h"
#include "ops/rope.h"

namespace brioche::ops {

// y = x · r · w with r = (mean(x²) + eps)^(−1/2), per row of D values:
//   dx += r · (w⊙dy) − x · r³/D · Σ_i (w⊙dy)_i x_i
//   x, dy, dx : f32 [n_rows, D];  weight : f32 [D]
// (the norm weight is frozen: no weight gradient)
void rms_norm_backward(const Tensor& x, const Tensor& weight, float eps, const Tensor& dy, Tensor& dx);

// out = silu(g) · u, silu(g) = g·σ(g):
//   du = dout · silu(g)
//   dg = dout · u · σ(g) · (1 + g · (1 − σ(g)))
//   gate, up, dout, dgate, dup : f32 [n_rows, inter]; dgate/dup may alias dout
// On CUDA dgate and dup may instead both be dense bf16 (separate from dout):
// the training MLP's gradients that only ops::lora_matmul_backward reads.
void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup);

// RoPE is an orthogonal rotation R(p·w) per pair, so its backward is the
// transpose R(p·w)ᵀ = R(−p·w): rope at negated positions, in place on dx.
void rope_backward(Tensor& dx, std::span<const int32_t> positions, const RopeParams& params);

}  // namespace brioche::ops
