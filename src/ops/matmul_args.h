// The checked argument struct of y = x·wᵀ, shared by matmul.cpp and
// fused_matmul.cpp (internal to ops/).
#pragma once

#include <string_view>

#include "backend/cpu/matmul.h"
#include "core/tensor.h"

namespace brioche::ops::detail {

// Checks shapes, dtypes, layouts and devices (errors name `op`).
cpu::MatmulArgs matmul_args(const Tensor& x, const Tensor& w, const Tensor& y, std::string_view op);

}  // namespace brioche::ops::detail
