// Matrix multiply against a weight matrix: the op that dominates inference.
#pragma once

#include "core/tensor.h"

namespace brioche::ops {

// y[n, m] = x[n, k] · w[m, k]ᵀ
//   x : f32, rows contiguous                 // [n_tokens, in_features]
//   w : any dtype (f32, f16, bf16, quantized) // [out_features, in_features]
//   y : f32, rows contiguous, written        // [n_tokens, out_features]
// n == 1 is the decode GEMV; larger n is prefill. Runs on the device of w.
void matmul(const Tensor& x, const Tensor& w, Tensor& y);

}  // namespace brioche::ops
