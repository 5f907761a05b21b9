// GEMV over block-quantized weights (see gemv.cuh). The types with an
// integer path go to gemv_int8 (gemv_int8.h); for the others (MLX affine, and
// shapes that path does not take) lane l of a warp decodes
// chunks l, l+32, ... (32 elements each) of its weight row into registers and
// multiplies them with the matching x values.

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/gemv_int8.h"
#include "backend/cuda/quant_decode.cuh"
#include "core/env_switch.h"

namespace brioche::cuda::detail {

namespace {

// kRowsPerWarp > 1 (single x row only): the warp walks several weight rows
// with one load of each x chunk kept in registers. For 4-bit weights an x
// chunk (128 B of f32) is 8x the bytes of its weight chunk, so without this
// reuse L1 traffic for x, not DRAM, bounds the kernel.
template <DType T, int kMaxRows, int kRowsPerWarp, bool kSwiglu>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_quant_kernel(GemvArgs a) {
  static_assert(kRowsPerWarp == 1 || kMaxRows == 1, "row reuse is for a single x row");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * kGemvWarps + warp) * kRowsPerWarp;
  gemv_prologue(a, row0, kRowsPerWarp, lane);
  if (row0 >= a.m) return;
  GemvTarget t[kRowsPerWarp];
  float acc[kRowsPerWarp][kMaxRows], acc_up[kRowsPerWarp][kMaxRows];
#pragma unroll
  for (int w = 0; w < kRowsPerWarp; ++w) {
    t[w] = gemv_target(a, min(row0 + w, a.m - 1));
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) acc[w][r] = acc_up[w][r] = 0.0f;
  }
  const int64_t n_chunks = a.k / 32;
  for (int64_t c = lane; c < n_chunks; c += 32) {
    if constexpr (kRowsPerWarp == 1) {
      float v[32], u[32];
      Decoder<T>::chunk(t[0].w, c, v);
      if constexpr (kSwiglu) Decoder<T>::chunk(t[0].w_up, c, u);
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) {
        if (r < a.n) {
          const float4* xr = reinterpret_cast<const float4*>(a.x + r * a.ldx + c * 32);
          float s = 0.0f, s_up = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            float4 xv = __ldg(xr + i);
            s += v[4 * i] * xv.x + v[4 * i + 1] * xv.y + v[4 * i + 2] * xv.z + v[4 * i + 3] * xv.w;
            if constexpr (kSwiglu)
              s_up += u[4 * i] * xv.x + u[4 * i + 1] * xv.y + u[4 * i + 2] * xv.z + u[4 * i + 3] * xv.w;
          }
          acc[0][r] += s;
          acc_up[0][r] += s_up;
        }
      }
    } else {
      float x[32];
      const float4* xr = reinterpret_cast<const float4*>(a.x + c * 32);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        float4 xv = __ldg(xr + i);
        x[4 * i] = xv.x;
        x[4 * i + 1] = xv.y;
        x[4 * i + 2] = xv.z;
        x[4 * i + 3] = xv.w;
      }
#pragma unroll
      for (int w = 0; w < kRowsPerWarp; ++w) {
        if (row0 + w < a.m) {
          float v[32];
          Decoder<T>::chunk(t[w].w, c, v);
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < 32; ++i) s += v[i] * x[i];
          acc[w][0] += s;
          if constexpr (kSwiglu) {
            Decoder<T>::chunk(t[w].w_up, c, v);
            float s_up = 0.0f;
#pragma unroll
            for (int i = 0; i < 32; ++i) s_up += v[i] * x[i];
            acc_up[w][0] += s_up;
          }
        }
      }
    }
  }
#pragma unroll
  for (int w = 0; w < kRowsPerWarp; ++w)
    if (row0 + w < a.m) gemv_reduce_store<kSwiglu, kMaxRows>(a, t[w], lane, acc[w], acc_up[w]);
}

template <DType T, int kMaxRows, int kRowsPerWarp, bool kSwiglu>
void launch_rows(const GemvArgs& a) {
  const int64_t rows_per_block = int64_t(kGemvWarps) * kRowsPerWarp;
  launch_dependent(gemv_quant_kernel<T, kMaxRows, kRowsPerWarp, kSwiglu>,
                   unsigned((a.m + rows_per_block - 1) / rows_per_block), kGemvWarps * 32, 0, a);
}

template <DType T, bool kSwiglu>
void launch_fused(const GemvArgs& a) {
  if (a.n == 1) {
    // As many rows per warp as still leave ~2 blocks per SM (132 on an H200);
    // a SwiGLU row is already two weight rows.
    if constexpr (!kSwiglu) {
      if (a.m >= 4 * kGemvWarps * 264) return launch_rows<T, 1, 4, false>(a);
    }
    if (a.m >= 2 * kGemvWarps * 264)
      launch_rows<T, 1, 2, kSwiglu>(a);
    else
      launch_rows<T, 1, 1, kSwiglu>(a);
  } else if (a.n <= 4) {
    launch_rows<T, 4, 1, kSwiglu>(a);
  } else {
    launch_rows<T, 8, 1, kSwiglu>(a);
  }
}

template <DType T>
void launch(const GemvArgs& a) {
  if (a.w_up != nullptr)
    launch_fused<T, true>(a);
  else
    launch_fused<T, false>(a);
}

}  // namespace

// Q8_0, Q4_0, Q4_1 and the K-quants: int8 activations and __dp4a
// (gemv_int8.cuh); the rest below decode to f32. BRIOCHE_CUDA_GEMV_INT8=0
// keeps every type on the f32 kernels (for A/B benchmarks).
bool gemv_quant_reads_int8(DType wtype, const GemvArgs& a) {
  static const bool int8_path = env_switch_on("BRIOCHE_CUDA_GEMV_INT8");
  return int8_path && gemv_int8_covers(wtype, a);
}

bool gemv_quant_takes_norm(DType wtype, const GemvArgs& a) {
  return gemv_quant_reads_int8(wtype, a) && gemv_int8_takes_norm(a);
}

void gemv_quant(DType wtype, const GemvArgs& a) {
  BRIOCHE_CHECK(dtype_info(wtype).quantized, "gemv_quant: ", dtype_name(wtype), " is not quantized");
  if (gemv_quant_reads_int8(wtype, a)) return gemv_int8(wtype, a);
  BRIOCHE_CHECK(a.norm_w == nullptr, "gemv_quant: only the int8 path's types take the RMSNorm of x, got ",
                dtype_name(wtype), " on the f32-decode kernels");
  BRIOCHE_CHECK(a.n >= 1 && a.n <= kMaxGemvRows, "gemv_quant: n must be 1..", kMaxGemvRows, ", got ", a.n);
  BRIOCHE_CHECK(a.k % 32 == 0 && a.ldx % 4 == 0 && (reinterpret_cast<uintptr_t>(a.x) & 15) == 0,
                "gemv_quant: x rows must be 16-byte aligned with k a multiple of 32, got k ", a.k, ", ldx ", a.ldx);
  for (int p = 0; p < a.n_parts; ++p)
    BRIOCHE_CHECK((reinterpret_cast<uintptr_t>(a.parts[p].w) & 15) == 0,
                  "gemv_quant: weight pointers must be 16-byte aligned");
  visit_decodable(wtype, [&]<DType T>() {
    if constexpr (dtype_info(T).quantized) launch<T>(a);
  });
}

}  // namespace brioche::cuda::detail
