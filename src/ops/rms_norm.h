// RMSNorm: y = x / sqrt(mean(x²) + eps) · weight, per row.
#pragma once

#include "core/tensor.h"

namespace brioche::ops {

// x      : f32 [n_rows, dim] (rows contiguous)
// weight : f32 [dim]
// out    : f32 [n_rows, dim], may alias x
// Qwen3's per-head q/k norm is this op on x viewed as [n_rows*n_heads, head_dim].
void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out);

}  // namespace brioche::ops
