// The GELU-gated product of Gemma's MLPs and per-layer inputs:
// out = gelu_tanh(gate) · up, gelu_tanh(g) = ½·g·(1 + tanh(√(2/π)·(g + 0.044715·g³)))
// (transformers' "gelu_pytorch_tanh").
#pragma once

#include "core/tensor.h"

namespace brioche::ops {

// gate, up, out : f32 [n_rows, dim], rows contiguous (row strides may
// differ: gate and up may be column ranges of one matrix); out may alias
// gate or up. On the tensors' device (one for all three).
void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out);

// Its backward: dgate = dout · up · gelu_tanh'(gate), dup = dout · gelu_tanh(gate).
// All f32 [n_rows, dim] on the CPU; dgate may alias dout (dup may not alias
// dout when both are wanted); dup may be undefined (up is then a constant,
// e.g. Gemma 4's per-layer inputs).
void gelu_tanh_mul_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor* dup);

}  // namespace brioche::ops
