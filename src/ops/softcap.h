// Soft-capping (Gemma's final logits): x = cap · tanh(x / cap), which keeps
// every value inside (−cap, cap) and leaves small ones nearly unchanged.
#pragma once

#include "core/tensor.h"

namespace brioche::ops {

// x : f32 [n_rows, dim] (or rank 1), in place, on its device; cap > 0.
void softcap(Tensor& x, float cap);

}  // namespace brioche::ops
