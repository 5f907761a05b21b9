// Backward of y = x·Wᵀ on the device (the math: ops/linear_backward.h).
//
// Column-major view (lt_gemm.h): dx[n, k] row-major is DX (k×n), w[m, k] is
// W (k×m), dy[n, m] is DY (m×n), so DX = W·DY: no transposes. The weight
// gradient dw[m, k] is DW (k×m) = X·DYᵀ with X (k×n).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/kernels.h"
#include "backend/cuda/lt_gemm.h"
#include "backend/cuda/train_kernels.h"
#include "backend/cuda/weight_gemm.h"

namespace brioche::cuda {

namespace {

// out[r, c] = bf16(w[row_begin + r, c]) for f16 rows of any width.
__global__ void f16_rows_to_bf16_kernel(const uint8_t* w, size_t w_row_bytes, int64_t row_begin, int64_t n_rows,
                                        int64_t k, __nv_bfloat16* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * k) return;
  const int64_t r = i / k, c = i % k;
  const __half v = reinterpret_cast<const __half*>(w + (row_begin + r) * w_row_bytes)[c];
  out[i] = __float2bfloat16_rn(__half2float(v));
}

}  // namespace

void weight_rows_to_bf16(DType wtype, const void* w, size_t w_row_bytes, int64_t row_begin, int64_t row_end, int64_t k,
                         void* out) {
  if (wtype == DType::F16) {
    const int64_t total = (row_end - row_begin) * k;
    if (total == 0) return;
    f16_rows_to_bf16_kernel<<<unsigned((total + 255) / 256), 256, 0, detail::current_stream()>>>(
        static_cast<const uint8_t*>(w), w_row_bytes, row_begin, row_end - row_begin, k,
        static_cast<__nv_bfloat16*>(out));
    CUDA_CHECK_LAUNCH();
    return;
  }
  dequantize_to_bf16(wtype, w, w_row_bytes, row_begin, row_end, k, out);
}

void matmul_input_grad(const backend::cpu::MatmulInputGradArgs& a) {
  if (a.n == 0 || a.k == 0) return;
  if (a.m == 0) {  // empty reduction: dx = 0 (or unchanged)
    if (!a.accumulate)
      CUDA_CHECK(
          cudaMemset2DAsync(a.dx, size_t(a.ld_dx) * 4, 0, size_t(a.k) * 4, size_t(a.n), detail::current_stream()));
    return;
  }
  const float beta = a.accumulate ? 1.0f : 0.0f;
  if (a.wtype == DType::F32) {
    detail::lt_gemm({.ab_type = CUDA_R_32F,
                     .compute = CUBLAS_COMPUTE_32F,
                     .a = a.w,
                     .lda = int64_t(a.w_row_bytes / 4),
                     .b = a.dy,
                     .ldb = a.ld_dy,
                     .c = a.dx,
                     .ldc = a.ld_dx,
                     .m = a.k,
                     .n = a.n,
                     .k = a.m,
                     .beta = beta,
                     .op_a = CUBLAS_OP_N,
                     .op_b = CUBLAS_OP_N});
    return;
  }
  // dy as bf16 [n, m] contiguous: one rounding (2^-9 relative) and f32's range.
  const std::shared_ptr<void> dy16 = detail::rows_to_16bit(a.dy, a.ld_dy, a.n, a.m);
  detail::weight_input_grad_gemm(a, dy16.get(), beta);
}

namespace detail {

void weight_input_grad_gemm(const backend::cpu::MatmulInputGradArgs& a, const void* dy16, float beta) {
  if (a.wtype == DType::BF16) {
    BRIOCHE_CHECK(a.w_row_bytes % 2 == 0, "matmul_input_grad: bf16 weight rows of odd byte stride");
    lt_gemm({.ab_type = CUDA_R_16BF,
             .compute = CUBLAS_COMPUTE_32F,
             .a = a.w,
             .lda = int64_t(a.w_row_bytes / 2),
             .b = dy16,
             .ldb = a.m,
             .c = a.dx,
             .ldc = a.ld_dx,
             .m = a.k,
             .n = a.n,
             .k = a.m,
             .beta = beta,
             .op_a = CUBLAS_OP_N,
             .op_b = CUBLAS_OP_N});
    return;
  }
  // f16 and quantized weights: bf16 tiles of weight rows, i.e. slices of the
  // reduction dimension m; each tile's product adds onto dx (β = 1 after the
  // first). Tiles are whole multiples of 128 rows so every dy16 column offset
  // stays 256-byte aligned for cuBLASLt.
  int64_t tile_rows = std::max<int64_t>(128, int64_t(kWeightTileBytes / (size_t(a.k) * 2)) / 128 * 128);
  tile_rows = std::min(tile_rows, a.m);
  std::shared_ptr<void> tile = allocate(size_t(tile_rows) * size_t(a.k) * 2);
  const auto* dy_bf16 = static_cast<const __nv_bfloat16*>(dy16);
  for (int64_t r0 = 0; r0 < a.m; r0 += tile_rows) {
    const int64_t r1 = std::min(a.m, r0 + tile_rows);
    weight_rows_to_bf16(a.wtype, a.w, a.w_row_bytes, r0, r1, a.k, tile.get());
    lt_gemm({.ab_type = CUDA_R_16BF,
             .compute = CUBLAS_COMPUTE_32F,
             .a = tile.get(),
             .lda = a.k,
             .b = dy_bf16 + r0,
             .ldb = a.m,
             .c = a.dx,
             .ldc = a.ld_dx,
             .m = a.k,
             .n = a.n,
             .k = r1 - r0,
             .beta = r0 == 0 ? beta : 1.0f,
             .op_a = CUBLAS_OP_N,
             .op_b = CUBLAS_OP_N});
  }
}

}  // namespace detail

void matmul_weight_grad(const backend::cpu::MatmulWeightGradArgs& a) {
  if (a.n == 0 || a.m == 0 || a.k == 0) return;
  detail::lt_gemm({.ab_type = CUDA_R_32F,
                   .compute = CUBLAS_COMPUTE_32F,
                   .a = a.x,
                   .lda = a.ld_x,
                   .b = a.dy,
                   .ldb = a.ld_dy,
                   .c = a.dw,
                   .ldc = a.ld_dw,
                   .m = a.k,
                   .n = a.m,
                   .k = a.n,
                   .beta = 1.0f,
                   .op_a = CUBLAS_OP_N,
                   .op_b = CUBLAS_OP_T});
}

}  // namespace brioche::cuda
