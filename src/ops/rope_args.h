// The checked argument struct of a RoPE call, shared by rope.cpp and the
// fused RoPE + K/V store of attention.cpp (internal to ops/).
#pragma once

#include <span>

#include "backend/cpu/rope.h"
#include "core/tensor.h"
#include "ops/rope.h"

namespace brioche::ops::detail {

// Checks x's shape against params and the positions (errors name "rope").
backend::cpu::RopeArgs rope_args(Tensor& x, std::span<const int32_t> positions, const RopeParams& params);

}  // namespace brioche::ops::detail
