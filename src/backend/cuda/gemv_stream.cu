// The streamed decode GEMV (gemv_stream.cuh) over bf16/f16 weights: each
// consumer thread owns 8 columns (16 bytes) of a tile, reads their 8 x values
// once and multiplies them into all 8 rows, so a tile costs it 2 global and
// 8 shared 16-byte loads. With the block's RMSNorm (norm_w) the consumers
// first write x̂ into shared memory, with the bits rms_norm gives.
//
// Llama-3-8B bf16 decode, batch 1: 222 → 236 tokens/s, 248 with the norm
// taken in (a kernel fewer before Q/K/V and before gate/up), 259 with each
// consumer thread releasing its own reads of a slot (in place of one lane
// per warp after a warp barrier).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/gemv_stream.cuh"
#include "core/env_switch.h"

namespace brioche::cuda::detail {

namespace {

using stream::kConsumerThreads;
using stream::kTileCols;
using stream::kTileRows;

constexpr int kColsPerThread = kTileCols / kConsumerThreads;  // 8: 16 bytes of a 16-bit type
static_assert(kColsPerThread == 8);

// x from global memory, or (kSharedX) x̂ from shared memory.
template <typename W, bool kSharedX>
struct DenseTile {
  static constexpr int kRowBytes = kTileCols * 2;
  using Acts = const float*;
  __device__ static uint32_t row_bytes(int64_t cols) { return uint32_t(cols * 2); }
  struct XShare {
    float4 x0, x1;
    bool inside;  // (k is a multiple of 8: a thread's columns are all in or all out)
  };
  __device__ static XShare load_x(const float* x, int64_t k, int64_t col0) {
    const int64_t col = col0 + threadIdx.x * kColsPerThread;
    if (col >= k) return {{}, {}, false};
    return {load_x4<kSharedX>(x + col), load_x4<kSharedX>(x + col + 4), true};
  }
  // Each weight row's 8 values are unpacked once for all n x rows.
  template <int kXRows>
  __device__ static void accumulate(const uint8_t (&tile)[kTileRows][kRowBytes], const XShare (&xs)[kXRows], int n,
                                    float (&acc)[kXRows][kTileRows]) {
    if (!xs[0].inside) return;
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) {
      float v[8];
      unpack8<W>(reinterpret_cast<const uint4*>(tile[i])[threadIdx.x], v);
#pragma unroll
      for (int r = 0; r < kXRows; ++r) {
        if (r >= n) break;
        const float4 x0 = xs[r].x0, x1 = xs[r].x1;
        acc[r][i] += v[0] * x0.x + v[1] * x0.y + v[2] * x0.z + v[3] * x0.w + v[4] * x1.x + v[5] * x1.y + v[6] * x1.z +
                     v[7] * x1.w;
      }
    }
  }
};

// The kernel for the launch's x rows: one row (taking the norm or not), or
// up to 2, 4 or 8 rows of x as given (the caller normalizes them first);
// kLora: with the adapter terms (GemvArgs::lora).
template <typename W, bool kSwiglu, bool kLora>
void launch_norm_or_not(const GemvArgs& a) {
  if (a.norm_w != nullptr)
    stream::launch<DenseTile<W, true>, kSwiglu, true, 1, kLora>(a, a.x);
  else if (a.n == 1)
    stream::launch<DenseTile<W, false>, kSwiglu, false, 1, kLora>(a, a.x);
  else if (a.n == 2)
    stream::launch<DenseTile<W, false>, kSwiglu, false, 2, kLora>(a, a.x);
  else if (a.n <= 4)
    stream::launch<DenseTile<W, false>, kSwiglu, false, 4, kLora>(a, a.x);
  else if constexpr (!kLora)  // (gemv_stream_takes_lora)
    stream::launch<DenseTile<W, false>, kSwiglu, false, 8, kLora>(a, a.x);
}

template <typename W, bool kSwiglu>
void launch_terms_or_not(const GemvArgs& a) {
  if (a.lora.u != nullptr)
    launch_norm_or_not<W, kSwiglu, true>(a);
  else
    launch_norm_or_not<W, kSwiglu, false>(a);
}

}  // namespace

bool gemv_stream_takes(DType wtype, const GemvArgs& a) {
  static const bool on = env_switch_on("BRIOCHE_CUDA_GEMV_STREAM");
  // Up to this many x rows a launch streams (BRIOCHE_CUDA_GEMV_STREAM_ROWS: A/B runs; 1 leaves 2..8 rows
  // to the warp-per-row kernel, which reads x once per weight row and row).
  static const int max_rows =
      std::clamp(int(env_number("BRIOCHE_CUDA_GEMV_STREAM_ROWS", kMaxGemvRows)), 1, kMaxGemvRows);
  if (!on || (wtype != DType::BF16 && wtype != DType::F16) || a.n > max_rows || !stream::launch_fits(a)) return false;
  bool ok = a.k % 8 == 0 && a.k >= kTileCols;
  if (a.norm_w != nullptr)  // (x̂ of one row in shared memory)
    ok = ok && a.n == 1 && rms_norm_threads(a.k) == kConsumerThreads && stream::aligned16(a.norm_w);
  return ok;
}

bool gemv_stream_takes_lora(DType wtype, const GemvArgs& a) {
  // Up to 4 x rows and ranks up to 32: what LoraLanes holds in warp 0's
  // registers (8 rows spilled). Each part's rows whole groups, so a group
  // reads one part's factors.
  if (!gemv_stream_takes(wtype, a) || a.n > 4 || a.lora.rank_cap > 32 || a.n_parts > stream::kLoraParts) return false;
  const int rows = a.w_up != nullptr ? stream::kGroupRows<true> : stream::kGroupRows<false>;
  for (int p = 0; p < a.n_parts; ++p)
    if (a.parts[p].m % rows != 0) return false;
  return true;
}

void gemv_stream(DType wtype, const GemvArgs& a) {
  BRIOCHE_CHECK(gemv_stream_takes(wtype, a),
                "gemv_stream: takes 1..8 x rows (one with the norm) of bf16/f16 weights of at least ",
                stream::kMinBytes >> 20, " MB, k a multiple of 8 from ", kTileCols, " (to ", stream::kMaxNormedK,
                " with the norm), 16-byte aligned rows; got ", dtype_name(wtype), ", n ", a.n, ", k ", a.k, ", ",
                gemv_weight_bytes(a), " weight bytes");
  const bool swiglu = a.w_up != nullptr;
  if (wtype == DType::BF16)
    swiglu ? launch_terms_or_not<__nv_bfloat16, true>(a) : launch_terms_or_not<__nv_bfloat16, false>(a);
  else
    swiglu ? launch_terms_or_not<__half, true>(a) : launch_terms_or_not<__half, false>(a);
}

}  // namespace brioche::cuda::detail
