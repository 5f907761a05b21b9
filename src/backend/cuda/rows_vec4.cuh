// Element-wise kernels over rows, 16 bytes of each input per thread (four
// f32 or eight bf16/f16 values): one 16-byte load per operand and no 64-bit
// division per element (the scalar kernels spent more time on `t / dim` than
// on memory at training shapes: SwiGLU over [10240, 14336] moved 2.2 TB/s).
// Rows stay strided; a 2-D grid puts the column groups on x and strides over
// rows on y.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <span>

namespace brioche::cuda::detail {

// Whether rows of `dim` elements at each pointer, with each row stride (in
// elements), can all be read and written `width` at a time: dim and the
// strides multiples of width, the pointers 16-byte aligned (a width of f32
// or 16-bit inputs is 16 bytes; a narrower output would need less, and 16 is
// what the allocator gives). Spans, not braced lists: nvcc's front end
// rejects braced lists as arguments inside function templates.
inline bool rows_fit_vec(int64_t width, int64_t dim, std::span<const void* const> ptrs,
                         std::span<const int64_t> strides) {
  if (dim % width != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  for (int64_t s : strides)
    if (s % width != 0) return false;
  return true;
}

// Threads per block of the vector kernels.
constexpr int kVecThreads = 256;

// Grid for vector kernels of `width` values per thread: x covers the
// dim/width groups, y covers rows (the kernel loops r += gridDim.y past
// 65,535).
inline dim3 vec_grid(int64_t n_rows, int64_t dim, int64_t width) {
  const int64_t groups = dim / width;
  const int64_t rows = n_rows < 65535 ? n_rows : 65535;
  return dim3(unsigned((groups + kVecThreads - 1) / kVecThreads), unsigned(rows));
}

#ifdef __CUDACC__
// The column this thread starts at (Width values per thread), or -1 past
// the row's end.
template <int Width>
__device__ __forceinline__ int64_t vec_column(int64_t dim) {
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * Width;
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
__device__ __forceinline__ float load1(const float* p) { return *p; }
__device__ __forceinline__ float load1(const __nv_bfloat16* p) { return __bfloat162float(*p); }  // exact
__device__ __forceinline__ float load1(const __half* p) { return __half2float(*p); }             // exact

// Values of T in one 16-byte load: 4 f32, 8 bf16 or f16.
template <typename T>
constexpr int kValuesPer16Bytes = int(16 / sizeof(T));

// Width values in f32, as a vector kernel holds them between its loads and
// its store.
template <int Width>
struct Floats {
  float v[Width];
};

// A 16-bit type's pair type, its exact widening and its rounding.
template <typename T>
struct Pair16;
template <>
struct Pair16<__nv_bfloat16> {
  using Type = __nv_bfloat162;
  static __device__ __forceinline__ float2 widen(Type h) { return __bfloat1622float2(h); }
  static __device__ __forceinline__ Type round(float a, float b) { return __floats2bfloat162_rn(a, b); }
};
template <>
struct Pair16<__half> {
  using Type = __half2;
  static __device__ __forceinline__ float2 widen(Type h) { return __half22float2(h); }
  static __device__ __forceinline__ Type round(float a, float b) { return __floats2half2_rn(a, b); }
};

__device__ __forceinline__ Floats<4> load_vec(const float* p) {
  const float4 v = load4(p);
  return {{v.x, v.y, v.z, v.w}};
}
// Eight bf16 or f16 from one 16-byte load, widened exactly.
template <typename T>
__device__ __forceinline__ Floats<8> load_vec(const T* p) {
  using P = Pair16<T>;
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const auto* h = reinterpret_cast<const typename P::Type*>(&raw);
  Floats<8> f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 w = P::widen(h[i]);
    f.v[2 * i] = w.x;
    f.v[2 * i + 1] = w.y;
  }
  return f;
}
// Four values into f32 (16 bytes) or bf16/f16 rows (8 bytes): store4.
template <typename Out>
__device__ __forceinline__ void store_vec(Out* p, const Floats<4>& f) {
  store4(p, make_float4(f.v[0], f.v[1], f.v[2], f.v[3]));
}
// Eight bf16 or f16 (rounded to nearest even) in one 16-byte store.
template <typename Out>
__device__ __forceinline__ void store_vec(Out* p, const Floats<8>& f) {
  using P = Pair16<Out>;
  typename P::Type h[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = P::round(f.v[2 * i], f.v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(h);
}
#endif

}  // namespace brioche::cuda::detail
