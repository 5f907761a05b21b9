// Decode GEMV with 8-bit activations for block-quantized weights (n ≤ 8):
// x is quantized once per call to int8 blocks of 32, and every weight block
// is multiplied with integer dot products (__dp4a) instead of being expanded
// to f32. See gemv_int8.cuh for the math and the layouts.
#pragma once

#include <cstdint>

#include "backend/cuda/gemv.cuh"
#include "core/dtype.h"

namespace brioche::cuda::detail {

// True when `wtype` with these arguments runs on the int8 path: Q8_0 and
// Q4_0 (k a multiple of 64: their 2-byte-aligned blocks are read as aligned
// words, and an even block's last word ends inside the next block), Q4_1 (k a
// multiple of 32), Q4_K, Q5_K and Q6_K (k a multiple of 256), n in 1..8, and
// weight rows aligned as the loads need (word-aligned for the 32-value types,
// 16-byte for Q4_K/Q5_K). Everything else keeps the f32-decode kernels of
// gemv_quant.cu.
bool gemv_int8_covers(DType wtype, const GemvArgs& args);

// Whether the x quantization can take args.norm_w (x̂ = RMSNorm(x) first):
// rows that rms_norm's CTA holds in registers (k ≤ 16,384), 16-byte aligned.
bool gemv_int8_takes_norm(const GemvArgs& args);

struct Int8Acts;
// One x row against big Q8_0/Q4_0 weights, streamed through shared memory
// in tiles of whole rows (gemv_stream_rows.cu); gemv_int8 hands them over.
bool gemv_stream_rows_takes(DType wtype, const GemvArgs& args);
void gemv_stream_rows(DType wtype, const GemvArgs& args, const Int8Acts& x);

// Quantizes x (or x̂) into scratch from the caching allocator and launches the
// integer GEMV; honours every fusion of GemvArgs (parts, accumulate, w_up, norm_w).
void gemv_int8(DType wtype, const GemvArgs& args);

}  // namespace brioche::cuda::detail
