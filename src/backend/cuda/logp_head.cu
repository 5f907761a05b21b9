// The fused log-prob head on the device (math: ops/logp_head.h).
//
// Per vocabulary chunk [v0, v1): the chunk's weight rows (bf16 in place, f32
// in place, or expanded to a bf16 tile), one cuBLASLt GEMM of the scored rows
// against them into z [n, chunk] f32, then a row kernel:
//   forward:  online log-sum-exp state (max, sum) and the target's logit;
//   backward: dz = d_logp · (1[v = t] − e^{z − lse}) as bf16 (f32 for f32
//             weights), and a second GEMM dh += dz · W_chunk.
// h is rounded to bf16 once for all chunks. Column-major view (lt_gemm.h):
// Z (chunk×n) = Wcᵀ·H with Wc stored H×chunk (op T) and H stored H×n;
// DH (H×n) += Wc·DZ with DZ stored chunk×n.
#include <cuda_bf16.h>

#include <cmath>

#include "backend/cuda/kernels.h"
#include "backend/cuda/lt_gemm.h"
#include "backend/cuda/train_kernels.h"

namespace brioche::cuda {

namespace {

constexpr int kRowThreads = 256;

__global__ void init_state_kernel(float* run_max, float* run_sum, float* target_logit, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  run_max[i] = -INFINITY;
  run_sum[i] = 0.0f;
  target_logit[i] = 0.0f;
}

// (m1, s1) ⊕ (m2, s2) = (M, s1·e^{m1−M} + s2·e^{m2−M}), M = max(m1, m2); empty = (−inf, 0).
__device__ void lse_merge(float& m, float& s, float m2, float s2) {
  const float big = fmaxf(m, m2);
  if (big == -INFINITY) return;
  s = s * expf(m - big) + s2 * expf(m2 - big);
  m = big;
}

// One block per scored row: the chunk's (max, Σ e^{z−max}) merged into the running state.
__global__ void lse_update_kernel(const float* z, int64_t ldz, int64_t width, int64_t v0, const int32_t* targets,
                                  float* run_max, float* run_sum, float* target_logit) {
  const int64_t i = blockIdx.x;
  const float* zi = z + i * ldz;
  float m = -INFINITY, s = 0.0f;
  for (int64_t v = threadIdx.x; v < width; v += blockDim.x) lse_merge(m, s, zi[v], 1.0f);
  for (int off = 16; off > 0; off >>= 1)
    lse_merge(m, s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off));
  __shared__ float warp_m[kRowThreads / 32], warp_s[kRowThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kRowThreads / 32; ++w) lse_merge(m, s, warp_m[w], warp_s[w]);
    float rm = run_max[i], rs = run_sum[i];
    lse_merge(rm, rs, m, s);
    run_max[i] = rm;
    run_sum[i] = rs;
    const int64_t t = targets[i] - v0;
    if (t >= 0 && t < width) target_logit[i] = zi[t];
  }
}

__global__ void lse_finish_kernel(const float* run_max, const float* run_sum, const float* target_logit, int64_t n,
                                  float* lse, float* logp) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float l = run_max[i] + logf(run_sum[i]);
  lse[i] = l;
  logp[i] = target_logit[i] - l;
}

// dz[i, v] = d_logp_i · (1[v = t_i] − e^{z − lse_i}); OutT bf16 or f32 (may be z itself).
template <typename OutT>
__global__ void logp_grad_kernel(const float* z, int64_t ldz, int64_t width, int64_t v0, const int32_t* targets,
                                 const float* lse, const float* d_logp, OutT* dz, int64_t ld_dz) {
  const int64_t i = blockIdx.x;
  const float g = d_logp[i], l = lse[i];
  const int64_t t = targets[i] - v0;
  for (int64_t v = threadIdx.x; v < width; v += blockDim.x) {
    float d = -g * expf(z[i * ldz + v] - l);
    if (v == t) d += g;
    if constexpr (std::is_same_v<OutT, float>)
      dz[i * ld_dz + v] = d;
    else
      dz[i * ld_dz + v] = __float2bfloat16_rn(d);
  }
}

// What the chunk GEMMs read: h (bf16 copy or f32 as is) and each chunk's weight rows.
class HeadOperands {
 public:
  explicit HeadOperands(const LogpHeadDeviceArgs& a) : a_(a), f32_(a.wtype == DType::F32) {
    width_max_ = std::min(a.chunk, a.vocab);
    if (!f32_) {
      h16_ = allocate(size_t(a.n) * size_t(a.H) * 2);
      convert_rows_to_16bit({.x = a.hidden, .ldx = a.ldh, .n = a.n, .k = a.H, .out = h16_.get(), .to_f16 = false});
      if (a.wtype != DType::BF16) tile_ = allocate(size_t(width_max_) * size_t(a.H) * 2);
    }
  }
  int64_t width_max() const { return width_max_; }
  cudaDataType_t type() const { return f32_ ? CUDA_R_32F : CUDA_R_16BF; }
  const void* h() const { return f32_ ? static_cast<const void*>(a_.hidden) : h16_.get(); }
  int64_t ldh() const { return f32_ ? a_.ldh : a_.H; }

  // Weight rows [v0, v1) as the GEMM's A operand (row-major [v1 − v0, H], row stride *ld elements).
  const void* chunk(int64_t v0, int64_t v1, int64_t* ld) {
    const auto* base = static_cast<const uint8_t*>(a_.w);
    if (f32_ || a_.wtype == DType::BF16) {
      *ld = int64_t(a_.w_row_bytes / (f32_ ? 4 : 2));
      return base + v0 * a_.w_row_bytes;
    }
    weight_rows_to_bf16(a_.wtype, a_.w, a_.w_row_bytes, v0, v1, a_.H, tile_.get());
    *ld = a_.H;
    return tile_.get();
  }

  // z[n, v1 − v0] (row stride ldz) = h · W[v0:v1]ᵀ; returns the chunk's A operand for reuse.
  const void* logits(int64_t v0, int64_t v1, float* z, int64_t ldz, int64_t* ld_w) {
    const void* w = chunk(v0, v1, ld_w);
    detail::lt_gemm({.ab_type = type(),
                     .compute = CUBLAS_COMPUTE_32F,
                     .a = w,
                     .lda = *ld_w,
                     .b = h(),
                     .ldb = ldh(),
                     .c = z,
                     .ldc = ldz,
                     .m = v1 - v0,
                     .n = a_.n,
                     .k = a_.H});
    return w;
  }

 private:
  const LogpHeadDeviceArgs& a_;
  bool f32_;
  int64_t width_max_ = 0;
  std::shared_ptr<void> h16_, tile_;
};

void check_args(const LogpHeadDeviceArgs& a) {
  BRIOCHE_CHECK(a.wtype == DType::F32 || a.w_row_bytes % 2 == 0, "logp head: 16-bit weight rows of odd byte stride");
  BRIOCHE_CHECK(a.chunk > 0 && a.vocab > 0, "logp head: chunk ", a.chunk, " and vocab ", a.vocab, " must be positive");
}

}  // namespace

void logp_head_forward(const LogpHeadDeviceArgs& a, float* lse, float* logp) {
  if (a.n == 0) return;
  check_args(a);
  cudaStream_t stream = detail::current_stream();
  HeadOperands ops(a);
  const int64_t ldz = ops.width_max();
  std::shared_ptr<void> z = allocate(size_t(a.n) * size_t(ldz) * 4);  // [n, chunk]
  std::shared_ptr<void> state = allocate(size_t(a.n) * 3 * 4);        // max | sum | target logit
  float* run_max = static_cast<float*>(state.get());
  float* run_sum = run_max + a.n;
  float* target_logit = run_sum + a.n;
  auto* targets = static_cast<const int32_t*>(upload_cached(a.targets, size_t(a.n) * 4));
  const unsigned row_blocks = unsigned((a.n + 255) / 256);
  init_state_kernel<<<row_blocks, 256, 0, stream>>>(run_max, run_sum, target_logit, a.n);
  CUDA_CHECK_LAUNCH();
  for (int64_t v0 = 0; v0 < a.vocab; v0 += a.chunk) {
    const int64_t v1 = std::min(a.vocab, v0 + a.chunk);
    int64_t ld_w = 0;
    ops.logits(v0, v1, static_cast<float*>(z.get()), ldz, &ld_w);
    lse_update_kernel<<<unsigned(a.n), kRowThreads, 0, stream>>>(static_cast<const float*>(z.get()), ldz, v1 - v0, v0,
                                                                 targets, run_max, run_sum, target_logit);
    CUDA_CHECK_LAUNCH();
  }
  lse_finish_kernel<<<row_blocks, 256, 0, stream>>>(run_max, run_sum, target_logit, a.n, lse, logp);
  CUDA_CHECK_LAUNCH();
}

void logp_head_backward(const LogpHeadDeviceArgs& a, const float* lse, const float* d_logp, float* d_hidden,
                        int64_t ld_dh, bool accumulate) {
  if (a.n == 0) return;
  check_args(a);
  cudaStream_t stream = detail::current_stream();
  HeadOperands ops(a);
  const bool f32 = a.wtype == DType::F32;
  const int64_t ldz = ops.width_max();
  std::shared_ptr<void> z = allocate(size_t(a.n) * size_t(ldz) * 4);                     // [n, chunk] f32
  std::shared_ptr<void> dz16 = f32 ? nullptr : allocate(size_t(a.n) * size_t(ldz) * 2);  // [n, chunk] bf16
  auto* targets = static_cast<const int32_t*>(upload_cached(a.targets, size_t(a.n) * 4));
  float* zf = static_cast<float*>(z.get());
  for (int64_t v0 = 0; v0 < a.vocab; v0 += a.chunk) {
    const int64_t v1 = std::min(a.vocab, v0 + a.chunk), width = v1 - v0;
    int64_t ld_w = 0;
    const void* w = ops.logits(v0, v1, zf, ldz, &ld_w);
    const void* dz = nullptr;
    if (f32) {
      logp_grad_kernel<float>
          <<<unsigned(a.n), kRowThreads, 0, stream>>>(zf, ldz, width, v0, targets, lse, d_logp, zf, ldz);
      dz = zf;
    } else {
      logp_grad_kernel<__nv_bfloat16><<<unsigned(a.n), kRowThreads, 0, stream>>>(
          zf, ldz, width, v0, targets, lse, d_logp, static_cast<__nv_bfloat16*>(dz16.get()), ldz);
      dz = dz16.get();
    }
    CUDA_CHECK_LAUNCH();
    detail::lt_gemm({.ab_type = ops.type(),
                     .compute = CUBLAS_COMPUTE_32F,
                     .a = w,
                     .lda = ld_w,
                     .b = dz,
                     .ldb = ldz,
                     .c = d_hidden,
                     .ldc = ld_dh,
                     .m = a.H,
                     .n = a.n,
                     .k = width,
                     .beta = v0 == 0 && !accumulate ? 0.0f : 1.0f,
                     .op_a = CUBLAS_OP_N,
                     .op_b = CUBLAS_OP_N});
  }
}

}  // namespace brioche::cuda
