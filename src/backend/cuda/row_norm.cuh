// The RMSNorm of one row, x̂ = x · (mean(x²) + eps)^(−1/2) ⊙ w, as every kernel
// that normalizes computes it: `rms_norm`, the int8 GEMV's x quantization and
// the dense GEMV with the norm fused in (gemv.cuh). One CTA per row; thread t
// holds the float4s i = t + j·blockDim.x (j < kRmsNormVec) in registers, so
// the sum of squares is added up in one order and the three give the same
// bits for the same CTA size (rms_norm_threads). A kernel whose CTA has
// other warps besides (the streamed GEMV's producer) normalizes with its
// first kThreads threads, which synchronize on named barrier 1: the same
// sums in the same order as a CTA of kThreads.
#pragma once

#include <cstdint>

namespace brioche::cuda::detail {

inline constexpr int kRmsNormVec = 4;  // float4s per thread

// The CTA size that normalizes a row of `dim` floats (a multiple of 4) with
// kRmsNormVec float4s per thread, or 0 when the row is too long for that.
inline int rms_norm_threads(int64_t dim) {
  if (dim <= 4 * kRmsNormVec * 256) return 256;
  if (dim <= 4 * kRmsNormVec * 1024) return 1024;
  return 0;
}

#ifdef __CUDACC__
// The threads that reduce together: the whole CTA (kThreads = 0), or its
// first kThreads (a multiple of 32) on named barrier 1.
template <int kThreads>
struct ThreadGroup {
  __device__ static unsigned size() { return kThreads > 0 ? unsigned(kThreads) : blockDim.x; }
  __device__ static void sync() {
    if constexpr (kThreads > 0)
      asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
    else
      __syncthreads();
  }
};

// Sum over the group (a multiple of 32 threads, ≤ 1024); every thread gets it.
template <int kThreads = 0>
__device__ __forceinline__ float block_sum(float v) {
  using Group = ThreadGroup<kThreads>;
  __shared__ float partial[32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  Group::sync();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  Group::sync();
  const int n_warps = Group::size() / 32;
  v = lane < n_warps ? partial[lane] : 0.0f;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// The norm weight in the layout rms_norm_row uses (zero past dim/4). Weights
// are written by no kernel, so a kernel may load them before its PDL wait
// (launch.cuh): they are then in registers when x arrives.
template <int kThreads = 0>
__device__ __forceinline__ void load_norm_weight(const float* __restrict__ w, int64_t dim, float4 (&g)[kRmsNormVec]) {
  const float4* w4 = reinterpret_cast<const float4*>(w);
  const int n4 = int(dim / 4);
#pragma unroll
  for (int j = 0; j < kRmsNormVec; ++j) {
    const int i = threadIdx.x + j * ThreadGroup<kThreads>::size();
    g[j] = i < n4 ? w4[i] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// v[j] = x̂ at float4 i = threadIdx.x + j·(group size), zero past dim/4, with
// g from load_norm_weight. The whole row is loaded before the first use: a
// decode step normalizes a single row, so latency, not bandwidth, is what
// this is made of. x 16-byte aligned, dim a multiple of 4; every thread of
// the group must call it.
template <int kThreads = 0>
__device__ __forceinline__ void rms_norm_row(const float* __restrict__ x, const float4 (&g)[kRmsNormVec], int64_t dim,
                                             float eps, float4 (&v)[kRmsNormVec]) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const int n4 = int(dim / 4);
  float sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kRmsNormVec; ++j) {
    const int i = threadIdx.x + j * ThreadGroup<kThreads>::size();
    v[j] = i < n4 ? x4[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    sq += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
  }
  const float inv_rms = rsqrtf(block_sum<kThreads>(sq) / float(dim) + eps);
#pragma unroll
  for (int j = 0; j < kRmsNormVec; ++j)
    v[j] = make_float4(v[j].x * inv_rms * g[j].x, v[j].y * inv_rms * g[j].y, v[j].z * inv_rms * g[j].z,
                       v[j].w * inv_rms * g[j].w);
}
#endif

}  // namespace brioche::cuda::detail
