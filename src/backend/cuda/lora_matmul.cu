// ops::lora_matmul and lora_matmul_backward on tensor cores (the math and
// the rounding: ops/lora_matmul.h).
//
// Column-major views as in lt_gemm.h: a row-major [rows, cols] matrix with
// row stride ld is the column-major cols×rows matrix with the same ld. With
// x [n, in], W [out, in], A [r, in], B [out, r], u and g [n, r]:
//   u  = s·x·Aᵀ    U  (r×n)   = s · op_T(A16: in×r) · X16 (in×n)
//   y  = u·Bᵀ      Y  (out×n) = op_T(B16: r×out) · U16 (r×n), then β = 1 for x·Wᵀ
//   g  = s·dy·B    G  (r×n)   = s · B16 (r×out) · DY16 (out×n)
//   dB += dyᵀ·u    DB (r×out) = U16 (r×n) · op_T(DY16: out×n)
//   dA += gᵀ·x     DA (in×r)  = X16 (in×n) · op_T(G16: r×n)
//   dx += g·A      DX (in×n)  = A16 (in×r) · G16 (r×n), then β = 1 for dy·W
// The bf16 copies of the rank-sized operands are padded to rp = r rounded up
// to 8 (zeros), so every bf16 leading dimension is a multiple of 16 bytes.
#include <cuda_bf16.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/lt_gemm.h"
#include "backend/cuda/train_kernels.h"
#include "backend/cuda/weight_gemm.h"

namespace brioche::cuda {

namespace {

using detail::lt_gemm;

int64_t padded_rank(int64_t r) { return (r + 7) / 8 * 8; }

// out [out_rows, out_cols] = bf16(x [rows, cols], row stride ldx), zeros
// outside x.
__global__ void to_bf16_padded_kernel(const float* x, int64_t ldx, int64_t rows, int64_t cols, int64_t out_rows,
                                      int64_t out_cols, __nv_bfloat16* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= out_rows * out_cols) return;
  const int64_t r = i / out_cols, c = i % out_cols;
  out[i] = r < rows && c < cols ? __float2bfloat16_rn(x[r * ldx + c]) : __float2bfloat16_rn(0.0f);
}

std::shared_ptr<void> to_bf16_padded(const float* x, int64_t ldx, int64_t rows, int64_t cols, int64_t out_rows,
                                     int64_t out_cols) {
  std::shared_ptr<void> out = allocate(size_t(out_rows) * size_t(out_cols) * 2);
  const int64_t total = out_rows * out_cols;
  to_bf16_padded_kernel<<<unsigned((total + 255) / 256), 256, 0, detail::current_stream()>>>(
      x, ldx, rows, cols, out_rows, out_cols, static_cast<__nv_bfloat16*>(out.get()));
  CUDA_CHECK_LAUNCH();
  return out;
}

// A bf16 GEMM with f32 output (the only kind here).
detail::GemmDesc bf16_gemm(const void* a, int64_t lda, cublasOperation_t op_a, const void* b, int64_t ldb,
                           cublasOperation_t op_b, float* c, int64_t ldc, int64_t m, int64_t n, int64_t k, float alpha,
                           float beta) {
  return {.ab_type = CUDA_R_16BF,
          .compute = CUBLAS_COMPUTE_32F,
          .a = a,
          .lda = lda,
          .b = b,
          .ldb = ldb,
          .c = c,
          .ldc = ldc,
          .m = m,
          .n = n,
          .k = k,
          .beta = beta,
          .op_a = op_a,
          .op_b = op_b,
          .alpha = alpha};
}

// bf16 rows as given, or a bf16 copy of the f32 rows (kept alive by `owner`).
const void* bf16_rows(const void* given, const float* x, int64_t ldx, int64_t n, int64_t k,
                      std::shared_ptr<void>& owner) {
  if (given != nullptr) return given;
  owner = detail::rows_to_16bit(x, ldx, n, k);
  return owner.get();
}

}  // namespace

void lora_matmul(std::span<const LoraMatmulPartArgs> parts, const void* x16_given) {
  const cpu::MatmulArgs& first = parts.front().base;
  const int64_t n = first.n, in = first.k;
  if (n == 0) return;
  std::shared_ptr<void> owner;
  const void* x16 = bf16_rows(x16_given, first.x, first.ldx, n, in, owner);
  for (const LoraMatmulPartArgs& p : parts) {
    const cpu::MatmulArgs& a = p.base;
    const LowRankArgs& lr = p.low_rank;
    if (lr.a == nullptr) {
      detail::weight_gemm(a, x16, 0.0f);
      continue;
    }
    const int64_t r = lr.r, rp = padded_rank(r), out = a.m;
    const auto a16 = detail::rows_to_16bit(lr.a, in, r, in);
    lt_gemm(bf16_gemm(a16.get(), in, CUBLAS_OP_T, x16, in, CUBLAS_OP_N, p.u, p.ld_u, r, n, in, lr.scale, 0.0f));
    const auto u16 = to_bf16_padded(p.u, p.ld_u, n, r, n, rp);
    const auto b16 = to_bf16_padded(lr.b, r, out, r, out, rp);
    lt_gemm(bf16_gemm(b16.get(), rp, CUBLAS_OP_T, u16.get(), rp, CUBLAS_OP_N, a.y, a.ldy, out, n, rp, 1.0f, 0.0f));
    detail::weight_gemm(a, x16, 1.0f);  // y = x·Wᵀ + u·Bᵀ
  }
}

void lora_matmul_backward(const float* x, int64_t ldx, std::span<const LoraMatmulGradPartArgs> parts,
                          const void* x16_given) {
  const backend::cpu::MatmulInputGradArgs& first = parts.front().base;
  const int64_t n = first.n, in = first.k;
  if (n == 0) return;
  std::shared_ptr<void> x_owner;
  const void* x16 = x16_given;                  // made once, for the first part with LoRA
  float beta = first.accumulate ? 1.0f : 0.0f;  // the first product into dx honours the mode, the rest add
  for (const LoraMatmulGradPartArgs& p : parts) {
    const backend::cpu::MatmulInputGradArgs& a = p.base;
    const int64_t out = a.m;
    std::shared_ptr<void> dy_owner;
    const void* dy16 = bf16_rows(p.dy16, a.dy, a.ld_dy, n, out, dy_owner);
    const LowRankArgs& lr = p.low_rank;
    if (lr.a != nullptr) {
      x16 = bf16_rows(x16, x, ldx, n, in, x_owner);
      const int64_t r = lr.r, rp = padded_rank(r);
      const auto b16 = to_bf16_padded(lr.b, r, out, r, out, rp);
      const auto a16 = to_bf16_padded(lr.a, in, r, in, rp, in);
      const auto u16 = to_bf16_padded(p.u, p.ld_u, n, r, n, rp);
      // g = s·dy·B into [n, rp] f32 (its padded columns come out zero), then bf16.
      const std::shared_ptr<void> g = allocate(size_t(n) * size_t(rp) * 4);
      float* g32 = static_cast<float*>(g.get());
      lt_gemm(bf16_gemm(b16.get(), rp, CUBLAS_OP_N, dy16, out, CUBLAS_OP_N, g32, rp, rp, n, out, lr.scale, 0.0f));
      const auto g16 = detail::rows_to_16bit(g32, rp, n, rp);
      lt_gemm(bf16_gemm(u16.get(), rp, CUBLAS_OP_N, dy16, out, CUBLAS_OP_T, p.grad_b, r, r, out, n, 1.0f, 1.0f));
      lt_gemm(bf16_gemm(x16, in, CUBLAS_OP_N, g16.get(), rp, CUBLAS_OP_T, p.grad_a, in, in, r, n, 1.0f, 1.0f));
      lt_gemm(bf16_gemm(a16.get(), in, CUBLAS_OP_N, g16.get(), rp, CUBLAS_OP_N, a.dx, a.ld_dx, in, n, rp, 1.0f, beta));
      beta = 1.0f;
    }
    detail::weight_input_grad_gemm(a, dy16, beta);
    beta = 1.0f;
  }
}

}  // namespace brioche::cuda
