// GEMV over f32/f16/bf16 weights (see gemv.cuh): each lane reads 16 bytes of
// its weight row per step (8 values of 16-bit types, 4 of f32), the warp 512
// contiguous bytes; four steps are unrolled so several loads are in flight.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/row_norm.cuh"
#include "core/env_switch.h"

namespace brioche::cuda::detail {

namespace {

// 16 bytes of W decoded to floats.
template <typename W>  // bf16 or f16
struct Vec16 {
  static constexpr int kElems = 8;
  __device__ static void load(const W* p, float (&v)[8]) { unpack8<W>(__ldg(reinterpret_cast<const uint4*>(p)), v); }
  __device__ static float one(const W* p) { return float(p[0]); }
};

template <>
struct Vec16<float> {
  static constexpr int kElems = 4;
  __device__ static void load(const float* p, float v[4]) {
    float4 f = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = f.x;
    v[1] = f.y;
    v[2] = f.z;
    v[3] = f.w;
  }
  __device__ static float one(const float* p) { return p[0]; }
};

// Σ_e w[e]·x[r, e] for this lane's share of weight row w0, into acc0[r], per
// x row r (x: [n, k], row stride ldx); with kW = 2 also row w1's into
// acc1[r] (SwiGLU's gate and up row j, or a pair of rows), walked together so
// each x chunk is read once for both (x loads are most of the kernel's
// instructions: 8B bf16 decode went 211.8 → 222.1 tokens/s when gate and up
// stopped reading x each). Each row's sum has the same order either way.
template <typename W, int kW, int kMaxRows, bool kSharedX>
__device__ __forceinline__ void dot_rows(const GemvArgs& a, const float* x, int64_t ldx, const W* w0, const W* w1,
                                         int lane, int64_t k_vec, float (&acc0)[kMaxRows], float (&acc1)[kMaxRows]) {
  constexpr int E = Vec16<W>::kElems;
  const W* const w[2] = {w0, w1};  // (w1 unused when kW = 1)
#pragma unroll 4
  for (int64_t e = int64_t(lane) * E; e < k_vec; e += 32 * E) {
    float v[kW][E];
#pragma unroll
    for (int i = 0; i < kW; ++i) Vec16<W>::load(w[i] + e, v[i]);
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r < a.n) {
        const float* xr = x + r * ldx + e;
        float s[kW] = {};
#pragma unroll
        for (int c = 0; c < E; c += 4) {
          const float4 xv = load_x4<kSharedX>(xr + c);
#pragma unroll
          for (int i = 0; i < kW; ++i)
            s[i] += v[i][c] * xv.x + v[i][c + 1] * xv.y + v[i][c + 2] * xv.z + v[i][c + 3] * xv.w;
        }
        acc0[r] += s[0];
        if constexpr (kW == 2) acc1[r] += s[kW - 1];
      }
    }
  }
  for (int64_t e = k_vec + lane; e < a.k; e += 32) {  // tail, one element per lane
    float wv[kW];
#pragma unroll
    for (int i = 0; i < kW; ++i) wv[i] = Vec16<W>::one(w[i] + e);
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r < a.n) {
        acc0[r] += wv[0] * x[r * ldx + e];
        if constexpr (kW == 2) acc1[r] += wv[kW - 1] * x[r * ldx + e];
      }
    }
  }
}

// x̂ of the call's n rows into shared memory ([n, k]), each row normalized
// by the whole CTA exactly as rms_norm_vec_kernel does (row_norm.cuh).
__device__ __forceinline__ void normalize_rows_to_shared(const GemvArgs& a, const float4 (&g)[kRmsNormVec],
                                                         float* normed) {
  for (int r = 0; r < a.n; ++r) {
    float4 v[kRmsNormVec];
    rms_norm_row(a.x + r * a.ldx, g, a.k, a.norm_eps, v);
    float4* out = reinterpret_cast<float4*>(normed + r * a.k);
#pragma unroll
    for (int j = 0; j < kRmsNormVec; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i < a.k / 4) out[i] = v[j];
    }
  }
  __syncthreads();
}

// Whether a plain launch's warps walk rows 2j and 2j + 1 together, reading
// each x chunk once for both: with several x rows, where x loads outnumber
// the weight's. Llama-3-8B bf16 decode at 4 rows went 398 → 438 tokens/s, at
// 8 rows 313 → 390; at 1 row it lost 1-3% (and SmolLM2 9%: half the warps).
template <bool kSwiglu, int kMaxRows>
inline constexpr bool kDensePairRows = !kSwiglu && kMaxRows > 1;

// A warp walks one weight row, SwiGLU's gate and up row j together, or a
// pair of rows (kDensePairRows; an odd last row is walked twice and stored
// once). kNorm: x̂ from shared memory (rms_norm_threads(k) threads per CTA,
// n·k floats of dynamic shared memory).
template <typename W, int kMaxRows, bool kSwiglu, bool kNorm>
__global__ void __launch_bounds__(256) gemv_dense_kernel(GemvArgs a, bool vectorized) {
  extern __shared__ float4 normed4[];
  constexpr int E = Vec16<W>::kElems;
  constexpr bool kPairs = kDensePairRows<kSwiglu, kMaxRows>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j = int64_t(blockIdx.x) * (blockDim.x / 32) + warp;
  const int64_t row0 = kPairs ? 2 * j : j, row1 = kPairs ? std::min(2 * j + 1, a.m - 1) : j;
  float4 g[kNorm ? kRmsNormVec : 1];
  if constexpr (kNorm) load_norm_weight(a.norm_w, a.k, g);  // before the wait: weights
  gemv_prologue(a, row0, kPairs ? 2 : 1, lane);
  const float* x = a.x;
  int64_t ldx = a.ldx;
  if constexpr (kNorm) {
    x = reinterpret_cast<const float*>(normed4);
    ldx = a.k;
    normalize_rows_to_shared(a, g, reinterpret_cast<float*>(normed4));
  }
  if (row0 >= a.m) return;
  const GemvTarget t0 = gemv_target(a, row0), t1 = gemv_target(a, row1);
  const int64_t k_vec = vectorized ? a.k / (32 * E) * (32 * E) : 0;  // whole warp steps
  constexpr int kW = kSwiglu || kPairs ? 2 : 1;                      // weight rows walked together
  float acc0[kMaxRows] = {}, acc1[kMaxRows] = {};
  dot_rows<W, kW, kMaxRows, kNorm>(a, x, ldx, reinterpret_cast<const W*>(t0.w),
                                   reinterpret_cast<const W*>(kSwiglu ? t0.w_up : t1.w), lane, k_vec, acc0, acc1);
  if constexpr (kSwiglu) {
    gemv_reduce_store<true, kMaxRows>(a, t0, lane, acc0, acc1);
  } else {
    gemv_reduce_store<false, kMaxRows>(a, t0, lane, acc0, acc0);
    if (kPairs && row1 != row0) gemv_reduce_store<false, kMaxRows>(a, t1, lane, acc1, acc1);
  }
}

template <typename W, bool kSwiglu, bool kNorm>
void launch_rows(const GemvArgs& a, bool vec) {
  const int threads = kNorm ? rms_norm_threads(a.k) : kGemvWarps * 32;
  const int warps_per_block = threads / 32;
  const size_t smem = kNorm ? size_t(a.n) * size_t(a.k) * 4 : 0;
  auto go = [&](auto kernel, bool pairs) {
    const int64_t warp_rows = pairs ? (a.m + 1) / 2 : a.m;  // what the warps walk (see the kernel)
    launch_dependent(kernel, unsigned((warp_rows + warps_per_block - 1) / warps_per_block), threads, smem, a, vec);
  };
  if (a.n == 1)
    go(gemv_dense_kernel<W, 1, kSwiglu, kNorm>, kDensePairRows<kSwiglu, 1>);
  else if (a.n <= 4)
    go(gemv_dense_kernel<W, 4, kSwiglu, kNorm>, kDensePairRows<kSwiglu, 4>);
  else
    go(gemv_dense_kernel<W, 8, kSwiglu, kNorm>, kDensePairRows<kSwiglu, 8>);
}

// The SwiGLU or the plain kernel, taking the norm or not.
template <typename W, bool kNorm>
void launch_fused(const GemvArgs& a, bool vec) {
  if (a.w_up != nullptr)
    launch_rows<W, true, kNorm>(a, vec);
  else
    launch_rows<W, false, kNorm>(a, vec);
}

template <typename W>
void launch(const GemvArgs& a, bool vec) {
  if (a.norm_w != nullptr)
    launch_fused<W, true>(a, vec);
  else
    launch_fused<W, false>(a, vec);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Vector loads need 16-byte aligned rows of w and x; otherwise one element
// per lane (odd shapes and strided views in tests).
bool vectorizable(const GemvArgs& a) {
  bool vec = aligned16(a.x) && a.ldx % 4 == 0 && (a.w_up == nullptr || aligned16(a.w_up));
  for (int p = 0; p < a.n_parts; ++p) vec = vec && aligned16(a.parts[p].w) && a.parts[p].w_row_bytes % 16 == 0;
  return vec;
}

}  // namespace

// A launch of at most this many weight bytes normalizes x itself (gemv.cuh).
// Each CTA re-reads x and norm_w ((n + 1)·k floats per 8 weight rows, half
// the weight bytes of a bf16 row at n = 1) from L2: cheaper than a norm
// kernel's launch and round trip only while the launch is latency bound.
constexpr int64_t kNormFusionMaxBytes = int64_t(8) << 20;
// x̂ in shared memory: 48 KB (no opt-in to more) less room for the static
// shared memory of the norm's block reduction.
constexpr size_t kNormSharedBytes = 46 << 10;

bool gemv_dense_takes_norm(DType wtype, const GemvArgs& a) {
  static const int64_t max_bytes =  // BRIOCHE_CUDA_NORM_FUSION_MB: A/B runs
      int64_t(env_number("BRIOCHE_CUDA_NORM_FUSION_MB", double(kNormFusionMaxBytes) / (1 << 20)) * (1 << 20));
  if (gemv_stream_takes(wtype, a)) return true;  // any size: its CTAs normalize x once each
  return (wtype == DType::BF16 || wtype == DType::F16 || wtype == DType::F32) && a.k % 4 == 0 &&
         rms_norm_threads(a.k) == 256 && size_t(a.n) * size_t(a.k) * 4 <= kNormSharedBytes && aligned16(a.norm_w) &&
         vectorizable(a) && gemv_weight_bytes(a) <= max_bytes;
}

void gemv_dense(DType wtype, const GemvArgs& a) {
  BRIOCHE_CHECK(a.n >= 1 && a.n <= kMaxGemvRows, "gemv_dense: n must be 1..", kMaxGemvRows, ", got ", a.n);
  BRIOCHE_CHECK(a.lora.u == nullptr || gemv_stream_takes_lora(wtype, a),
                "gemv_dense: adapter terms are added only by the streamed GEMV (gemv_stream_takes_lora)");
  if (gemv_stream_takes(wtype, a)) {
    gemv_stream(wtype, a);
    return;
  }
  BRIOCHE_CHECK(a.norm_w == nullptr || gemv_dense_takes_norm(wtype, a),
                "gemv_dense: the RMSNorm of x fuses only where gemv_dense_takes_norm (k a multiple of 4 up to 4,096, "
                "x̂ within 46 KB, weights within 8 MB, 16-byte aligned rows); got k ",
                a.k, ", n ", a.n, ", ", gemv_weight_bytes(a), " weight bytes");
  const bool vec = vectorizable(a);
  switch (wtype) {
    case DType::BF16: launch<__nv_bfloat16>(a, vec); return;
    case DType::F16: launch<__half>(a, vec); return;
    case DType::F32: launch<float>(a, vec); return;
    default: fail("gemv_dense: unsupported weight dtype ", dtype_name(wtype));
  }
}

}  // namespace brioche::cuda::detail
