// GEMV over block-quantized weights (see gemv.cuh). Lane l of a warp decodes
// chunks l, l+32, ... (32 elements each) of its weight row into registers and
// multiplies them with the matching x values.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/quant_decode.cuh"

namespace brioche::cuda::detail {

namespace {

template <DType T, int kMaxRows>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_quant_kernel(GemvArgs a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kGemvWarps + warp;
  if (row >= a.m) return;
  const uint8_t* w_row = static_cast<const uint8_t*>(a.w) + row * a.w_row_bytes;
  float acc[kMaxRows];
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) acc[r] = 0.0f;
  const int64_t n_chunks = a.k / 32;
  for (int64_t c = lane; c < n_chunks; c += 32) {
    float v[32];
    Decoder<T>::chunk(w_row, c, v);
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r < a.n) {
        const float4* xr = reinterpret_cast<const float4*>(a.x + r * a.ldx + c * 32);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          float4 xv = __ldg(xr + i);
          s += v[4 * i] * xv.x + v[4 * i + 1] * xv.y + v[4 * i + 2] * xv.z + v[4 * i + 3] * xv.w;
        }
        acc[r] += s;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    float s = acc[r];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0 && r < a.n) a.y[r * a.ldy + row] = s;
  }
}

template <DType T>
void launch(const GemvArgs& a) {
  dim3 grid(unsigned((a.m + kGemvWarps - 1) / kGemvWarps)), block(kGemvWarps * 32);
  cudaStream_t s = current_stream();
  if (a.n == 1) gemv_quant_kernel<T, 1><<<grid, block, 0, s>>>(a);
  else if (a.n <= 4) gemv_quant_kernel<T, 4><<<grid, block, 0, s>>>(a);
  else gemv_quant_kernel<T, 8><<<grid, block, 0, s>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void gemv_quant(DType wtype, const GemvArgs& a) {
  BRIOCHE_CHECK(dtype_info(wtype).quantized, "gemv_quant: ", dtype_name(wtype), " is not quantized");
  BRIOCHE_CHECK(a.n >= 1 && a.n <= 8, "gemv_quant: n must be 1..8, got ", a.n);
  BRIOCHE_CHECK(a.k % 32 == 0 && a.ldx % 4 == 0 && (reinterpret_cast<uintptr_t>(a.x) & 15) == 0,
                "gemv_quant: x rows must be 16-byte aligned with k a multiple of 32, got k ", a.k,
                ", ldx ", a.ldx);
  BRIOCHE_CHECK((reinterpret_cast<uintptr_t>(a.w) & 15) == 0, "gemv_quant: weight pointer must be 16-byte aligned");
  visit_decodable(wtype, [&]<DType T>() {
    if constexpr (dtype_info(T).quantized) launch<T>(a);
  });
}

}  // namespace brioche::cuda::detail
