// Row gather and its adjoint, with host-side row indices (uploaded by the
// CUDA launchers like RoPE positions): the LM head reads only the hidden
// rows whose next token is scored.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace brioche::ops {

// dst[i, :] = src[rows[i], :]
//   src : f32 [n_src, dim];  dst : f32 [rows.size(), dim]; same device
void gather_rows(const Tensor& src, std::span<const int32_t> rows, Tensor& dst);

// dst[rows[i], :] += src[i, :] for i = 0, 1, ... in that order, so a row
// listed twice (prefix-shared: chosen[0] and rejected[0] are both scored
// from row P−1) gets the same sum on every device and every run.
//   src : f32 [rows.size(), dim];  dst : f32 [n_dst, dim]; same device
void scatter_add_rows(const Tensor& src, std::span<const int32_t> rows, Tensor& dst);

}  // namespace brioche::ops
