// y = x·wᵀ on the device: GEMV kernels for decode (n ≤ 8), cuBLASLt for
// prefill and large batches.
//
// cuBLASLt is column-major. Our row-major y[n, m] is the column-major m×n
// matrix Y (ld = ldy); row-major w[m, k] is column-major k×m, x[n, k] is k×n.
// So Y = op(W)·X with op = transpose: A = w (TRANSA = T), B = x (N).
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/lt_gemm.h"
#include "backend/cuda/weight_gemm.h"
#include "core/env_switch.h"

namespace brioche::cuda {

namespace detail {

std::shared_ptr<void> rows_to_16bit(const float* x, int64_t ldx, int64_t n, int64_t k, bool to_f16) {
  std::shared_ptr<void> out = allocate(size_t(n) * size_t(k) * 2);
  convert_rows_to_16bit({.x = x, .ldx = ldx, .n = n, .k = k, .out = out.get(), .to_f16 = to_f16});
  return out;
}

std::shared_ptr<void> activations_16bit(const cpu::MatmulArgs& a) {
  if (a.wtype == DType::F32) return nullptr;
  return rows_to_16bit(a.x, a.ldx, a.n, a.k, a.wtype == DType::F16);
}

void weight_gemm(const cpu::MatmulArgs& a, const void* x16, float beta) {
  const DType wt = a.wtype;
  if (wt == DType::F32) {
    // Full f32 (no TF32): f32 weights are the accuracy reference path.
    lt_gemm({.ab_type = CUDA_R_32F, .compute = CUBLAS_COMPUTE_32F, .a = a.w,
             .lda = int64_t(a.w_row_bytes / 4), .b = a.x, .ldb = a.ldx, .c = a.y, .ldc = a.ldy,
             .m = a.m, .n = a.n, .k = a.k, .beta = beta});
    return;
  }
  if (wt == DType::BF16 || wt == DType::F16) {
    BRIOCHE_CHECK(a.w_row_bytes % 2 == 0, "matmul: 16-bit weight rows of odd byte stride");
    lt_gemm({.ab_type = wt == DType::F16 ? CUDA_R_16F : CUDA_R_16BF, .compute = CUBLAS_COMPUTE_32F, .a = a.w,
             .lda = int64_t(a.w_row_bytes / 2), .b = x16, .ldb = a.k, .c = a.y, .ldc = a.ldy, .m = a.m,
             .n = a.n, .k = a.k, .beta = beta});
    return;
  }
  // Quantized: expand row tiles of w to bf16, one GEMM per tile into the
  // matching columns of y.
  const int64_t tile_rows =
      std::max<int64_t>(64, std::min<int64_t>(a.m, int64_t(kWeightTileBytes / (size_t(a.k) * 2))));
  std::shared_ptr<void> tile = allocate(size_t(tile_rows) * size_t(a.k) * 2);
  for (int64_t r0 = 0; r0 < a.m; r0 += tile_rows) {
    const int64_t r1 = std::min(a.m, r0 + tile_rows);
    dequantize_to_bf16(wt, a.w, a.w_row_bytes, r0, r1, a.k, tile.get());
    lt_gemm({.ab_type = CUDA_R_16BF, .compute = CUBLAS_COMPUTE_32F, .a = tile.get(), .lda = a.k,
             .b = x16, .ldb = a.k, .c = a.y + r0, .ldc = a.ldy, .m = r1 - r0, .n = a.n, .k = a.k,
             .beta = beta});
  }
}

}  // namespace detail

namespace {

constexpr int kMaxGemvRows = 8;

using detail::lt_gemm;

void gemm(const cpu::MatmulArgs& a, float beta) { detail::weight_gemm(a, detail::activations_16bit(a).get(), beta); }

detail::GemvPart gemv_part(const cpu::MatmulArgs& a) {
  return {.w = a.w, .w_row_bytes = a.w_row_bytes, .y = a.y, .ldy = a.ldy, .m = a.m};
}

// A GEMV whose weights fit in this many bytes asks L2 for all of them while
// it waits on the kernel before it (gemv.cuh, launch.cuh): about what HBM
// streams during one small kernel (~4 µs at 4.5 TB/s). Such GEMVs are latency
// bound (SmolLM2 decode: 885 → 1,018 tokens/s). Larger ones stream at full
// bandwidth on their own: prefetching their first 16 MB made Llama-3-8B
// decode slower (202 → 195 tokens/s), their first 4 MB changed nothing.
// BRIOCHE_CUDA_PREFETCH=0 (or BRIOCHE_CUDA_PDL=0) turns it off.
constexpr int64_t kGemvPrefetchBytes = int64_t(16) << 20;

int64_t gemv_prefetch_rows(const detail::GemvArgs& g) {
  static const bool on = detail::pdl_enabled() && env_switch_on("BRIOCHE_CUDA_PREFETCH");
  return on && detail::gemv_weight_bytes(g) <= kGemvPrefetchBytes ? g.m : 0;
}

// Whether the GEMV for `g` applies g.norm_w itself (gemv.cuh).
// BRIOCHE_CUDA_FUSE_NORM=0 keeps the norm a kernel of its own (A/B runs).
bool gemv_takes_norm(DType wtype, const detail::GemvArgs& g) {
  static const bool on = env_switch_on("BRIOCHE_CUDA_FUSE_NORM");
  if (!on) return false;
  return dtype_info(wtype).quantized ? detail::gemv_quant_takes_norm(wtype, g)
                                     : detail::gemv_dense_takes_norm(wtype, g);
}

// x̂ = RMSNorm(x) of `a`'s rows into norm.normed: `a` reading x̂ instead.
cpu::MatmulArgs normalized(cpu::MatmulArgs a, const InputNorm& norm) {
  rms_norm({.x = a.x, .weight = norm.weight, .out = norm.normed, .n_rows = a.n, .dim = a.k, .x_stride = a.ldx,
            .out_stride = norm.normed_stride, .eps = norm.eps});
  a.x = norm.normed;
  a.ldx = norm.normed_stride;
  return a;
}

// One GEMV launch over `g` (x, n, k of `a`; its parts and fusions set), of
// x̂ = RMSNorm(x) when `norm` is given.
void gemv(const cpu::MatmulArgs& args, detail::GemvArgs g, const InputNorm* norm = nullptr) {
  cpu::MatmulArgs a = args;
  g.x = a.x;
  g.ldx = a.ldx;
  g.n = int(a.n);
  g.k = a.k;
  g.m = 0;
  for (int p = 0; p < g.n_parts; ++p) g.m += g.parts[p].m;
  g.prefetch_rows = gemv_prefetch_rows(g);
  if (norm != nullptr) {
    g.norm_w = norm->weight;
    g.norm_eps = norm->eps;
    if (!gemv_takes_norm(a.wtype, g)) {
      a = normalized(a, *norm);
      g.x = a.x;
      g.ldx = a.ldx;
      g.norm_w = nullptr;
    }
  }
  if (!dtype_info(a.wtype).quantized) {
    detail::gemv_dense(a.wtype, g);
    return;
  }
  // The quantized kernels read x with 16-byte loads: copy misaligned rows.
  std::shared_ptr<void> aligned;
  if ((reinterpret_cast<uintptr_t>(a.x) & 15) != 0 || a.ldx % 4 != 0) {
    aligned = allocate(size_t(a.n) * size_t(a.k) * 4);
    CUDA_CHECK(cudaMemcpy2DAsync(aligned.get(), size_t(a.k) * 4, a.x, size_t(a.ldx) * 4, size_t(a.k) * 4,
                                 size_t(a.n), cudaMemcpyDeviceToDevice, detail::current_stream()));
    g.x = static_cast<const float*>(aligned.get());
    g.ldx = a.k;
  }
  detail::gemv_quant(a.wtype, g);
}

}  // namespace

void matmul(const cpu::MatmulArgs& a) {
  if (a.n == 0 || a.m == 0) return;
  if (a.n > kMaxGemvRows) return gemm(a, 0.0f);
  gemv(a, {.parts = {gemv_part(a)}});
}

void matmul_accumulate(const cpu::MatmulArgs& a) {
  if (a.n == 0 || a.m == 0) return;
  if (a.n > kMaxGemvRows) return gemm(a, 1.0f);
  gemv(a, {.parts = {gemv_part(a)}, .accumulate = true});
}

void matmul_swiglu(const cpu::MatmulArgs& gate_args, const cpu::MatmulArgs& up_args, const InputNorm* norm) {
  if (gate_args.n == 0 || gate_args.m == 0) return;
  if (gate_args.n <= kMaxGemvRows) return gemv(gate_args, {.parts = {gemv_part(gate_args)}, .w_up = up_args.w}, norm);
  const cpu::MatmulArgs gate = norm != nullptr ? normalized(gate_args, *norm) : gate_args;
  cpu::MatmulArgs up = up_args;
  up.x = gate.x;
  up.ldx = gate.ldx;
  std::shared_ptr<void> x16 = detail::activations_16bit(gate);
  detail::weight_gemm(gate, x16.get(), 0.0f);
  detail::weight_gemm(up, x16.get(), 0.0f);
  swiglu({.gate = gate.y, .up = up.y, .out = gate.y, .n_rows = gate.n, .dim = gate.m, .gate_stride = gate.ldy,
          .up_stride = up.ldy, .out_stride = gate.ldy});
}

void matmul_group(std::span<const cpu::MatmulArgs> parts, const InputNorm* norm) {
  BRIOCHE_CHECK(!parts.empty() && parts.size() <= 3, "matmul_group: 1 to 3 weights, got ", parts.size());
  const cpu::MatmulArgs& a = parts[0];
  bool shared = true;  // one x, one dtype: one GEMV launch or one conversion
  for (const cpu::MatmulArgs& p : parts)
    shared = shared && p.x == a.x && p.ldx == a.ldx && p.n == a.n && p.k == a.k && p.wtype == a.wtype;
  if (a.n == 0) return;
  if (shared && a.n <= kMaxGemvRows) {
    detail::GemvArgs g{.n_parts = int(parts.size())};
    for (size_t i = 0; i < parts.size(); ++i) g.parts[i] = gemv_part(parts[i]);
    return gemv(a, g, norm);
  }
  // Everything else reads x̂ from memory: normalized once for all parts.
  std::vector<cpu::MatmulArgs> on_normed(parts.begin(), parts.end());
  if (norm != nullptr) {
    const cpu::MatmulArgs n0 = normalized(a, *norm);
    for (cpu::MatmulArgs& p : on_normed) {
      p.x = n0.x;
      p.ldx = n0.ldx;
    }
  }
  if (!shared) {
    for (const cpu::MatmulArgs& p : on_normed) cuda::matmul(p);  // not cpu::matmul, which ADL also finds
    return;
  }
  std::shared_ptr<void> x16 = detail::activations_16bit(on_normed[0]);
  for (const cpu::MatmulArgs& p : on_normed) detail::weight_gemm(p, x16.get(), 0.0f);
}

}  // namespace brioche::cuda
