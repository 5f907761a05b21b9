// Sigmoid gating: x ← x · sigmoid(gate), per element or per row.
// Qwen 3.5's gated attention (the attention output times sigmoid of a
// second half of q_proj) and its MoE block's shared-expert gate.
#pragma once

#include "core/tensor.h"

namespace brioche::ops {

//   x    : f32 [n_rows, dim]
//   gate : f32 [n_rows, dim], or [n_rows, 1] (one gate per row); rows may be strided
// CPU only.
void sigmoid_gate(const Tensor& gate, Tensor& x);

}  // namespace brioche::ops
