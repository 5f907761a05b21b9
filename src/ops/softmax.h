// Numerically stable softmax over the last dimension, in place.
#pragma once

#include "core/tensor.h"

namespace brioche::ops {

// x : f32 [n_rows, n]; each row becomes exp(x − max) / Σ exp(x − max).
// A row that is all −inf becomes all zeros.
void softmax(Tensor& x);

}  // namespace brioche::ops
