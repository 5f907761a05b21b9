// CPU matmul against a weight matrix of any dtype: y[n, m] = x[n, k] · w[m, k]ᵀ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cpu/read_ahead.h"
#include "core/dtype.h"

namespace brioche::cpu {

struct MatmulArgs {
  const float* x = nullptr;  // [n, k], row stride ldx floats
  int64_t ldx = 0;
  DType wtype = DType::F32;
  const void* w = nullptr;  // [m, k] rows of wtype, row stride w_row_bytes
  size_t w_row_bytes = 0;
  float* y = nullptr;  // [n, m], row stride ldy floats
  int64_t ldy = 0;
  int64_t n = 0, m = 0, k = 0;
};

// Multi-threaded on ThreadPool::global(). Quantized weights use 8-bit
// activations (one quantization of x per call) and integer dot products;
// f32/f16/bf16 weights use f32 FMA. The instruction set is active_isa().
// `read_ahead`: bytes another op reads next, requested while the tiles
// compute (read_ahead.h); the quantized decode kernels take them (few rows
// and columns), the others ignore them.
void matmul(const MatmulArgs& args, std::span<const ByteRange> read_ahead = {});

// parts[i].y = x · parts[i].wᵀ for weights that read the same x (Q/K/V,
// gate/up). When they share a quantized dtype the activations are quantized
// once for all of them and the weight rows of every part are split over the
// pool in one dispatch; each output is bit-identical to matmul(parts[i]).
// Otherwise it runs matmul on each part.
// `read_ahead` spread over the tiles of every part.
void matmul_group(std::span<const MatmulArgs> parts, std::span<const ByteRange> read_ahead = {});

}  // namespace brioche::cpu
