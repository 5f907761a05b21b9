// GEMV over f32/f16/bf16 weights (see gemv.cuh): each lane reads 16 bytes of
// its weight row per step (8 values of 16-bit types, 4 of f32), the warp 512
// contiguous bytes; four steps are unrolled so several loads are in flight.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"

namespace brioche::cuda::detail {

namespace {

template <typename W>
struct Vec16;  // 16 bytes of W decoded to floats

template <>
struct Vec16<__nv_bfloat16> {
  static constexpr int kElems = 8;
  __device__ static void load(const __nv_bfloat16* p, float v[8]) {
    uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(words[i] << 16);
      v[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  }
  __device__ static float one(const __nv_bfloat16* p) { return __bfloat162float(p[0]); }
};

template <>
struct Vec16<__half> {
  static constexpr int kElems = 8;
  __device__ static void load(const __half* p, float v[8]) {
    uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f = __half22float2(h[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
  __device__ static float one(const __half* p) { return __half2float(p[0]); }
};

template <>
struct Vec16<float> {
  static constexpr int kElems = 4;
  __device__ static void load(const float* p, float v[4]) {
    float4 f = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
  }
  __device__ static float one(const float* p) { return p[0]; }
};

// Σ_e w[e]·x[r, e] for this lane's share of one weight row, per x row r.
template <typename W, int kMaxRows>
__device__ __forceinline__ void dot_row(const GemvArgs& a, const W* w_row, int lane, int64_t k_vec,
                                        float (&acc)[kMaxRows]) {
  constexpr int E = Vec16<W>::kElems;
#pragma unroll 4
  for (int64_t e = int64_t(lane) * E; e < k_vec; e += 32 * E) {
    float v[E];
    Vec16<W>::load(w_row + e, v);
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r < a.n) {
        const float* xr = a.x + r * a.ldx + e;
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < E; i += 4) {
          float4 xv = __ldg(reinterpret_cast<const float4*>(xr + i));
          s += v[i] * xv.x + v[i + 1] * xv.y + v[i + 2] * xv.z + v[i + 3] * xv.w;
        }
        acc[r] += s;
      }
    }
  }
  for (int64_t e = k_vec + lane; e < a.k; e += 32) {  // tail, one element per lane
    float wv = Vec16<W>::one(w_row + e);
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r)
      if (r < a.n) acc[r] += wv * a.x[r * a.ldx + e];
  }
}

template <typename W, int kMaxRows, bool kSwiglu>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_dense_kernel(GemvArgs a, bool vectorized) {
  constexpr int E = Vec16<W>::kElems;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kGemvWarps + warp;
  gemv_prologue(a, row, lane);
  if (row >= a.m) return;
  const GemvTarget t = gemv_target(a, row);
  const int64_t k_vec = vectorized ? a.k / (32 * E) * (32 * E) : 0;  // whole warp steps
  float acc[kMaxRows], acc_up[kMaxRows];
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) acc[r] = acc_up[r] = 0.0f;
  dot_row<W, kMaxRows>(a, reinterpret_cast<const W*>(t.w), lane, k_vec, acc);
  if constexpr (kSwiglu) dot_row<W, kMaxRows>(a, reinterpret_cast<const W*>(t.w_up), lane, k_vec, acc_up);
  gemv_reduce_store<kSwiglu, kMaxRows>(a, t, lane, acc, acc_up);
}

template <typename W, bool kSwiglu>
void launch_rows(const GemvArgs& a, bool vec) {
  dim3 grid(unsigned((a.m + kGemvWarps - 1) / kGemvWarps)), block(kGemvWarps * 32);
  if (a.n == 1) launch_dependent(gemv_dense_kernel<W, 1, kSwiglu>, grid, block, 0, a, vec);
  else if (a.n <= 4) launch_dependent(gemv_dense_kernel<W, 4, kSwiglu>, grid, block, 0, a, vec);
  else launch_dependent(gemv_dense_kernel<W, 8, kSwiglu>, grid, block, 0, a, vec);
}

template <typename W>
void launch(const GemvArgs& a, bool vec) {
  if (a.w_up != nullptr) launch_rows<W, true>(a, vec);
  else launch_rows<W, false>(a, vec);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

void gemv_dense(DType wtype, const GemvArgs& a) {
  BRIOCHE_CHECK(a.n >= 1 && a.n <= 8, "gemv_dense: n must be 1..8, got ", a.n);
  // Vector loads need 16-byte aligned rows of w and x; otherwise one element
  // per lane (odd shapes and strided views in tests).
  bool vec = aligned16(a.x) && a.ldx % 4 == 0 && (a.w_up == nullptr || aligned16(a.w_up));
  for (int p = 0; p < a.n_parts; ++p) vec = vec && aligned16(a.parts[p].w) && a.parts[p].w_row_bytes % 16 == 0;
  switch (wtype) {
    case DType::BF16: launch<__nv_bfloat16>(a, vec); return;
    case DType::F16: launch<__half>(a, vec); return;
    case DType::F32: launch<float>(a, vec); return;
    default: fail("gemv_dense: unsupported weight dtype ", dtype_name(wtype));
  }
}

}  // namespace brioche::cuda::detail
