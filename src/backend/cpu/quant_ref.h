// Scalar reference codecs for every storage dtype: one row at a time.
//
// These are the ground truth the SIMD kernels are tested against and what
// embedding/convert use. Block layouts are described in core/dtype.h.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace brioche::cpu {

// dst[0..n) = decoded src row. n must be a multiple of the dtype's block.
void dequantize_row_ref(DType dtype, const void* src, float* dst, int64_t n);

// Encode n floats. Q8_0/Q4_0/Q4_1 reproduce llama.cpp's reference quantizers
// bit for bit. Q4_K/Q5_K/Q6_K use a simpler min/max search than llama.cpp's
// iterative make_qx_quants (valid blocks, slightly larger error, not bit-equal).
// MLX affine uses scale = (max-min)/(2^bits-1), bias = min per group.
void quantize_row_ref(DType dtype, const float* src, void* dst, int64_t n);

// The 6-bit (scale, min) pair of sub-block j (0..7) of a Q4_K/Q5_K super-block.
inline void k_quant_scale_min(int j, const uint8_t* scales, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = uint8_t((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
    *min = uint8_t((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

}  // namespace brioche::cpu
