// The GELU-gated product of Gemma's MLPs and per-layer inputs:
// out = gelu_tanh(gate) · up, gelu_tanh(g) = ½·g·(1 + tanh(√(2/π)·(g + 0.044715·g³)))
// (transformers' "gelu_pytorch_tanh").
#pragma once

#include "core/tensor.h"

namespace brioche::ops {

// gate, up, out : f32 [n_rows, dim], rows contiguous (row strides may
// differ: gate and up may be column ranges of one matrix); out may alias
// gate or up. CPU only in this build.
void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out);

}  // namespace brioche::ops
