// Conversions feeding cuBLASLt: weights of any dtype to bf16 tiles, and f32
// activations to bf16/f16.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_decode.cuh"

namespace brioche::cuda {

namespace {

// One thread per 32-element chunk: decode, round to bf16. The 256 chunks of
// a CTA are one contiguous run of `out` (row r's chunk c starts at element
// 32·(r·k/32 + c)), so they go out through shared memory as 16-byte stores
// to consecutive addresses. Stored by each thread directly, its 64 bytes
// were 16 four-byte stores 64 bytes apart per warp instruction: 0.4 TB/s on
// the H200 (364 µs for Llama-3-8B's gate/up weights in Q4_0).
constexpr int kDequantThreads = 256;
// A chunk's bf16 values in shared memory: 64 bytes and 16 of padding, so
// the 8 threads of a quarter-warp write 8 different bank quads.
constexpr int kStagedChunkBytes = 80;

template <DType T>
__global__ void __launch_bounds__(kDequantThreads)
    dequantize_bf16_kernel(const uint8_t* w, size_t w_row_bytes, int64_t row_begin, int64_t n_rows, int64_t k,
                           __nv_bfloat16* out) {
  __shared__ __align__(16) uint8_t staged[kDequantThreads * kStagedChunkBytes];
  const int64_t chunks_per_row = k / 32, total = n_rows * chunks_per_row;
  const int64_t first = int64_t(blockIdx.x) * kDequantThreads, i = first + threadIdx.x;
  if (i < total) {
    const int64_t r = i / chunks_per_row, c = i % chunks_per_row;
    float v[32];
    detail::Decoder<T>::chunk(w + (row_begin + r) * w_row_bytes, c, v);
    uint4* dst = reinterpret_cast<uint4*>(staged + threadIdx.x * kStagedChunkBytes);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const __nv_bfloat162 h[4] = {
          __floats2bfloat162_rn(v[8 * q], v[8 * q + 1]), __floats2bfloat162_rn(v[8 * q + 2], v[8 * q + 3]),
          __floats2bfloat162_rn(v[8 * q + 4], v[8 * q + 5]), __floats2bfloat162_rn(v[8 * q + 6], v[8 * q + 7])};
      dst[q] = *reinterpret_cast<const uint4*>(h);
    }
  }
  __syncthreads();
  const int64_t vectors = 4 * std::min<int64_t>(kDequantThreads, total - first);  // 16 bytes each
  uint4* run = reinterpret_cast<uint4*>(out + first * 32);
  for (int64_t u = threadIdx.x; u < vectors; u += kDequantThreads)
    run[u] = *reinterpret_cast<const uint4*>(staged + (u / 4) * kStagedChunkBytes + (u % 4) * 16);
}

__global__ void convert_rows_kernel(const float* x, int64_t ldx, int64_t n, int64_t k, void* out, bool to_f16) {
  detail::pdl_prologue();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * k) return;
  const int64_t r = i / k, c = i % k;
  const float v = x[r * ldx + c];
  if (to_f16)
    static_cast<__half*>(out)[i] = __float2half_rn(v);
  else
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
}

// Eight elements per thread: two 16-byte loads, one 16-byte store (rows of
// a multiple of 8 floats, 16-byte aligned). The scalar kernel above moved
// 1.7 TB/s on the H200; this one is bound by HBM.
template <bool kToF16>
__global__ void convert_rows_x8_kernel(const float* x, int64_t ldx, int64_t n, int64_t k, void* out) {
  detail::pdl_prologue();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // index of an 8-element group
  const int64_t groups_per_row = k / 8;
  if (i >= n * groups_per_row) return;
  const int64_t r = i / groups_per_row, c = (i % groups_per_row) * 8;
  const float4* src = reinterpret_cast<const float4*>(x + r * ldx + c);
  const float4 lo = src[0], hi = src[1];
  uint4 packed;
  if constexpr (kToF16) {
    const __half2 h[4] = {__floats2half2_rn(lo.x, lo.y), __floats2half2_rn(lo.z, lo.w), __floats2half2_rn(hi.x, hi.y),
                          __floats2half2_rn(hi.z, hi.w)};
    packed = *reinterpret_cast<const uint4*>(h);
  } else {
    const __nv_bfloat162 h[4] = {__floats2bfloat162_rn(lo.x, lo.y), __floats2bfloat162_rn(lo.z, lo.w),
                                 __floats2bfloat162_rn(hi.x, hi.y), __floats2bfloat162_rn(hi.z, hi.w)};
    packed = *reinterpret_cast<const uint4*>(h);
  }
  reinterpret_cast<uint4*>(out)[i] = packed;  // row r's group starts at element r·k + c = 8·i
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* x, int64_t n, float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __bfloat162float(x[i]);
}

}  // namespace

void bf16_to_f32(const void* x, int64_t n, float* out) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<unsigned((n + 255) / 256), 256, 0, detail::current_stream()>>>(
      static_cast<const __nv_bfloat16*>(x), n, out);
  CUDA_CHECK_LAUNCH();
}

void dequantize_to_bf16(DType wtype, const void* w, size_t w_row_bytes, int64_t row_begin, int64_t row_end, int64_t k,
                        void* out) {
  BRIOCHE_CHECK(k % 32 == 0, "dequantize_to_bf16: k must be a multiple of 32, got ", k);
  BRIOCHE_CHECK(reinterpret_cast<uintptr_t>(out) % 16 == 0, "dequantize_to_bf16: out must be 16-byte aligned, got ",
                out);
  const int64_t n_rows = row_end - row_begin;
  const int64_t threads = n_rows * (k / 32);
  if (threads <= 0) return;
  const unsigned grid = unsigned((threads + kDequantThreads - 1) / kDequantThreads);
  bool ok = detail::visit_decodable(wtype, [&]<DType T>() {
    dequantize_bf16_kernel<T><<<grid, kDequantThreads, 0, detail::current_stream()>>>(
        static_cast<const uint8_t*>(w), w_row_bytes, row_begin, n_rows, k, static_cast<__nv_bfloat16*>(out));
  });
  BRIOCHE_CHECK(ok, "dequantize_to_bf16: cannot decode ", dtype_name(wtype));
  CUDA_CHECK_LAUNCH();
}

void convert_rows_to_16bit(const ConvertRowsArgs& a) {
  const int64_t total = a.n * a.k;
  if (total == 0) return;
  const bool vector = a.k % 8 == 0 && a.ldx % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
  // Dependent launches (launch.cuh): the activations' conversion starts
  // while the kernel that wrote them drains.
  if (!vector) {
    detail::launch_dependent(convert_rows_kernel, unsigned((total + 255) / 256), 256, 0, a.x, a.ldx, a.n, a.k, a.out,
                             a.to_f16);
  } else {
    const unsigned grid = unsigned((total / 8 + 255) / 256);
    if (a.to_f16)
      detail::launch_dependent(convert_rows_x8_kernel<true>, grid, 256, 0, a.x, a.ldx, a.n, a.k, a.out);
    else
      detail::launch_dependent(convert_rows_x8_kernel<false>, grid, 256, 0, a.x, a.ldx, a.n, a.k, a.out);
  }
}

}  // namespace brioche::cuda
