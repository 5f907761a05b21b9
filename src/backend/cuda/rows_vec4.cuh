// Element-wise kernels over f32 rows, four floats per thread: one 16-byte
// load per operand and no 64-bit division per element (the scalar kernels
// spent more time on `t / dim` than on memory at training shapes: SwiGLU
// over [10240, 14336] moved 2.2 TB/s). Rows stay strided; a 2-D grid puts
// the float4 column groups on x and strides over rows on y.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <span>

namespace brioche::cuda::detail {

// Whether rows of `dim` elements at each pointer, with each row stride (in
// elements), can all be read and written four at a time: 16-byte aligned
// (for a bf16 output 8 bytes would do; 16 is what the allocator gives).
// Spans, not braced lists: nvcc's front end rejects braced lists as
// arguments inside function templates.
inline bool rows_fit_vec4(int64_t dim, std::span<const void* const> ptrs, std::span<const int64_t> strides) {
  if (dim % 4 != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  for (int64_t s : strides)
    if (s % 4 != 0) return false;
  return true;
}

constexpr int kVec4Threads = 256;

// Grid for vec4 kernels: x covers dim/4 groups, y covers rows (the kernel
// loops r += gridDim.y past 65,535).
inline dim3 vec4_grid(int64_t n_rows, int64_t dim) {
  const int64_t groups = dim / 4;
  const int64_t rows = n_rows < 65535 ? n_rows : 65535;
  return dim3(unsigned((groups + kVec4Threads - 1) / kVec4Threads), unsigned(rows));
}

#ifdef __CUDACC__
// The float column this thread starts at, or -1 past the row's end.
__device__ __forceinline__ int64_t vec4_column(int64_t dim) {
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  return c < dim ? c : -1;
}
__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
// Four bf16 (rounded to nearest even) in one 8-byte store.
__device__ __forceinline__ void store4(__nv_bfloat16* p, float4 v) {
  const __nv_bfloat162 h[2] = {__floats2bfloat162_rn(v.x, v.y), __floats2bfloat162_rn(v.z, v.w)};
  *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(h);
}
// The same in f16 (the rows an f16 weight's GEMM reads).
__device__ __forceinline__ void store4(__half* p, float4 v) {
  const __half2 h[2] = {__floats2half2_rn(v.x, v.y), __floats2half2_rn(v.z, v.w)};
  *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(h);
}
__device__ __forceinline__ void store1(float* p, float v) { *p = v; }
__device__ __forceinline__ void store1(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store1(__half* p, float v) { *p = __float2half_rn(v); }
#endif

}  // namespace brioche::cuda::detail
