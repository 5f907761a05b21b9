// SwiGLU gate of the Llama MLP: out = silu(gate) · up, silu(g) = g / (1 + e^−g).
#pragma once

#include "core/tensor.h"

namespace brioche::ops {

// gate, up, out : f32 [n_rows, intermediate]; out may alias gate or up.
// On CUDA out may also be dense bf16 (rounded once from the f32 result):
// what the training MLP hands to ops::lora_matmul.
void swiglu(const Tensor& gate, const Tensor& up, Tensor& out);

}  // namespace brioche::ops
