// Decode-time matrix-vector kernels: y[r, :] = x[r, :] · wᵀ for up to 8 rows.
//
// One warp per weight row; the row is read exactly once, coalesced across the
// warp, and dequantized in registers; x rows (a few KB) stay in L1/L2. The
// number of x rows is a template bound (1, 4 or 8) with a runtime count, so
// one instantiation serves n in (bound/2, bound].
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace brioche::cuda::detail {

struct GemvArgs {
  const float* x;  // [n, k], row stride ldx floats (16-byte aligned rows)
  int64_t ldx;
  const void* w;   // [m, k] rows, row stride w_row_bytes
  size_t w_row_bytes;
  float* y;        // [n, m], row stride ldy floats
  int64_t ldy;
  int n;           // 1..8
  int64_t m, k;
};

inline constexpr int kGemvWarps = 4;  // rows of w per block

// Launchers, one per file so nvcc runs in parallel.
void gemv_dense(DType wtype, const GemvArgs& args);  // f32, f16, bf16
void gemv_quant(DType wtype, const GemvArgs& args);  // every block-quantized dtype

}  // namespace brioche::cuda::detail
