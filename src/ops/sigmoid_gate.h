// Sigmoid gating: x ← x · sigmoid(gate), per element or per row.
// Qwen 3.5's gated attention (the attention output times sigmoid of a
// second half of q_proj) and its MoE block's shared-expert gate.
#pragma once

#include "core/tensor.h"

namespace brioche::ops {

//   x    : f32 [n_rows, dim]
//   gate : f32 [n_rows, dim], or [n_rows, 1] (one gate per row); rows may be strided
// CPU and CUDA.
void sigmoid_gate(const Tensor& gate, Tensor& x);

// Its backward (for training), y = x·σ(g):
//   dx = dy·σ(g),   dg = dy·x·σ(g)·(1 − σ(g))   (per row: dg = Σ_i of that)
//   x    : f32 [n_rows, dim] the ungated input;  dy, dx : f32 [n_rows, dim] (dx written, may alias dy)
//   dgate: f32 shaped as gate, written.  CPU only.
void sigmoid_gate_backward(const Tensor& gate, const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dgate);

}  // namespace brioche::ops
