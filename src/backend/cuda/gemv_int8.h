// Decode GEMV with 8-bit activations for block-quantized weights (n ≤ 8):
// x is quantized once per call to int8 blocks of 32, and every weight block
// is multiplied with integer dot products (__dp4a) instead of being expanded
// to f32. See gemv_int8.cuh for the math and the layouts.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "backend/cuda/gemv.cuh"
#include "core/dtype.h"

namespace brioche::cuda::detail {

// x as the integer kernels read it (gemv_int8.cuh has the math).
struct Int8Acts {
  const int8_t* q;   // [n, k] int8 values, row stride k
  const float2* ds;  // [n, k/32] (dx, sx) per 32-value block
  int64_t k;
  int64_t n_blocks;  // k / 32
};

// Room for n rows of x's int8 blocks, from the caching allocator: q [n, k],
// then ds [n, k/32] (n·k is a multiple of 32, so ds starts 16-byte aligned).
struct Int8Scratch {
  std::shared_ptr<void> memory;
  int8_t* q;
  float2* ds;
  int64_t k;
  Int8Acts acts() const { return {.q = q, .ds = ds, .k = k, .n_blocks = k / 32}; }
};
Int8Scratch allocate_int8_acts(int n, int64_t k);

// True when `wtype` with these arguments runs on the int8 path: Q8_0 and
// Q4_0 (k a multiple of 64: their 2-byte-aligned blocks are read as aligned
// words, and an even block's last word ends inside the next block), Q4_1 (k a
// multiple of 32), Q4_K, Q5_K and Q6_K (k a multiple of 256), MLX affine
// 4/8-bit (k a multiple of the group and of 32), n in 1..8, and weight rows
// aligned as the loads need (word-aligned for the 32-value types, 16-byte for
// Q4_K/Q5_K, 8-byte for the affine groups). Everything else keeps the
// f32-decode kernels of gemv_quant.cu.
bool gemv_int8_covers(DType wtype, const GemvArgs& args);

// Whether the x quantization can take args.norm_w (x̂ = RMSNorm(x) first):
// rows that rms_norm's CTA holds in registers (k ≤ 16,384), 16-byte aligned.
bool gemv_int8_takes_norm(const GemvArgs& args);

// One x row against big Q8_0/Q4_0/Q4_K/Q5_K/Q6_K weights, streamed through
// shared memory in tiles of whole rows (gemv_stream_rows.cu); gemv_int8 hands
// them over.
bool gemv_stream_rows_takes(DType wtype, const GemvArgs& args);

// The RMSNorm of an accumulating GEMV's output y, handed to the GEMV after
// it (norm_handoff.h has the math): per 32-row block b of y, y ⊙ norm_w
// quantized as that GEMV's x (q, ds[b]) and Σ y² over the block (sum_sq[b]).
struct NormedOut {
  const float* norm_w = nullptr;  // [m]; no handoff when null
  int8_t* q = nullptr;            // [m]
  float2* ds = nullptr;           // [m / 32]
  float* sum_sq = nullptr;        // [m / 32]
};

// The streamed GEMV's fusions beyond GemvArgs (one x row), an argument of
// its kernel alone so that the other GEMV kernels' arguments stay short:
//   * normed_out.norm_w set: the launch adds to y and writes y's norm for
//     the next GEMV (O and down);
//   * x_sum_sq: x is a norm such a launch wrote; each output is multiplied
//     by (Σ x_sum_sq / k + args.norm_eps)^(−1/2).
struct StreamFusions {
  NormedOut normed_out{};
  const float* x_sum_sq = nullptr;  // [k / 32]
};
void gemv_stream_rows(DType wtype, const GemvArgs& args, const Int8Acts& x, const StreamFusions& fusions = {});
// Whether a launch of it that adds to y may hand y's norm on
// (norm_handoff.h): rows a multiple of 32, and not the long launches (down)
// of the 8-bit types: the 4- to 6-bit types gain at O and down, while Q8_0's
// down, the longest launch, loses more stream (fewer CTAs with fewer tiles in
// flight) than the handoff saves (docs/perf-log/cuda-decode.md#norm-handoff).
bool gemv_stream_rows_hands_on(DType wtype, const GemvArgs& args);

// Quantizes x (or x̂) into scratch from the caching allocator and launches the
// integer GEMV; honours every fusion of GemvArgs (parts, accumulate, w_up, norm_w).
void gemv_int8(DType wtype, const GemvArgs& args);
struct HandedNorm;
// The GEMV of gemv_int8 for args.norm_w on the norm of x that the GEMV
// before it handed on (norm_handoff.h), when there is one and this launch
// reads it (one x row of a type on the int8 path, the streamed kernel);
// false otherwise, and nothing launched.
bool gemv_int8_handed(DType wtype, const GemvArgs& args, const HandedNorm& norm);
// The GEMV of gemv_int8 on x already quantized into `x` (by another
// kernel, such as the attention's last: attention.cu); args.x and
// args.norm_w are not read.
void gemv_int8_quantized(DType wtype, const GemvArgs& args, const Int8Acts& x);

}  // namespace brioche::cuda::detail
