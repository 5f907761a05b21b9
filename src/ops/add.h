// Element-wise additions: the residual stream and broadcast biases.
#pragma once

#include "core/tensor.h"

namespace brioche::ops {

// out = a + b, all f32 with the same shape [n_rows, dim]; out may alias a or b.
void add(const Tensor& a, const Tensor& b, Tensor& out);

// x[r, :] += bias for every row; x f32 [n_rows, dim], bias f32 [dim].
void add_bias(Tensor& x, const Tensor& bias);

}  // namespace brioche::ops
