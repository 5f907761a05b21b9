// Scaled accumulation and scaling of f32 rows (LoRA's s·u·Bᵀ term, gradient
// scaling), on the tensors' device.
#pragma once

#include "core/tensor.h"

namespace brioche::ops {

// y += s · x        x, y : f32 [n_rows, dim], rows contiguous, same device
void add_scaled(const Tensor& x, float s, Tensor& y);

// x *= s            x : f32 [n_rows, dim] (or rank 1)
void scale(Tensor& x, float s);

// x = value         x : f32 [n_rows, dim] (or rank 1); overwrites NaN too
void fill(Tensor& x, float value);

}  // namespace brioche::ops
