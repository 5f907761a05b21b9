// y = x·wᵀ on the device: GEMV kernels for decode (n ≤ 8), cuBLASLt for
// prefill and large batches.
//
// cuBLASLt is column-major. Our row-major y[n, m] is the column-major m×n
// matrix Y (ld = ldy); row-major w[m, k] is column-major k×m, x[n, k] is k×n.
// So Y = op(W)·X with op = transpose: A = w (TRANSA = T), B = x (N).
#include <algorithm>
#include <array>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/lora_rows.h"
#include "backend/cuda/lt_gemm.h"
#include "backend/cuda/norm_handoff.h"
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

namespace {

// Where weight_gemm_into writes y = x·wᵀ + beta·y: [n, m] values of `type`
// (f32, or the 16-bit type the GEMM reads), row stride ld values.
struct GemmOutput {
  void* y;
  int64_t ld;
  cudaDataType_t type;
  float beta;
};

void weight_gemm_into(const cpu::MatmulArgs& a, const void* x16, const GemmOutput& out) {
  const DType wt = a.wtype;
  if (wt == DType::F32) {
    // Full f32 (no TF32): f32 weights are the accuracy reference path.
    lt_gemm({.ab_type = CUDA_R_32F,
             .compute = CUBLAS_COMPUTE_32F,
             .a = a.w,
             .lda = int64_t(a.w_row_bytes / 4),
             .b = a.x,
             .ldb = a.ldx,
             .c = out.y,
             .ldc = out.ld,
             .c_type = out.type,
             .m = a.m,
             .n = a.n,
             .k = a.k,
             .beta = out.beta});
    return;
  }
  if (wt == DType::BF16 || wt == DType::F16) {
    BRIOCHE_CHECK(a.w_row_bytes % 2 == 0, "matmul: 16-bit weight rows of odd byte stride");
    lt_gemm({.ab_type = wt == DType::F16 ? CUDA_R_16F : CUDA_R_16BF,
             .compute = CUBLAS_COMPUTE_32F,
             .a = a.w,
             .lda = int64_t(a.w_row_bytes / 2),
             .b = x16,
             .ldb = a.k,
             .c = out.y,
             .ldc = out.ld,
             .c_type = out.type,
             .m = a.m,
             .n = a.n,
             .k = a.k,
             .beta = out.beta});
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
    lt_gemm({.ab_type = CUDA_R_16BF,
             .compute = CUBLAS_COMPUTE_32F,
             .a = tile.get(),
             .lda = a.k,
             .b = x16,
             .ldb = a.k,
             .c = static_cast<char*>(out.y) + size_t(r0) * output_bytes(out.type),
             .ldc = out.ld,
             .c_type = out.type,
             .m = r1 - r0,
             .n = a.n,
             .k = a.k,
             .beta = out.beta});
  }
}

}  // namespace

void weight_gemm(const cpu::MatmulArgs& a, const void* x16, float beta) {
  weight_gemm_into(a, x16, {.y = a.y, .ld = a.ldy, .type = CUDA_R_32F, .beta = beta});
}

void weight_gemm_16bit(const cpu::MatmulArgs& a, const void* x16, void* y16, int64_t ldy16) {
  BRIOCHE_CHECK(a.wtype != DType::F32, "weight_gemm_16bit: expected 16-bit or quantized weights (a GEMM on 16-bit ",
                "inputs), got ", dtype_name(a.wtype), " weights, whose GEMM reads and writes f32");
  weight_gemm_into(a, x16,
                   {.y = y16, .ld = ldy16, .type = a.wtype == DType::F16 ? CUDA_R_16F : CUDA_R_16BF, .beta = 0.0f});
}

}  // namespace detail

namespace {

using detail::kMaxGemvRows;

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
  rms_norm({.x = a.x,
            .weight = norm.weight,
            .out = norm.normed,
            .n_rows = a.n,
            .dim = a.k,
            .x_stride = a.ldx,
            .out_stride = norm.normed_stride,
            .eps = norm.eps});
  a.x = norm.normed;
  a.ldx = norm.normed_stride;
  return a;
}

// x̂ = RMSNorm(x) of the parts' x (one x) into norm.normed, and the parts
// reading it.
void read_normalized(std::span<cpu::MatmulArgs> parts, const InputNorm& norm) {
  const cpu::MatmulArgs n0 = normalized(parts[0], norm);
  for (cpu::MatmulArgs& p : parts) {
    p.x = n0.x;
    p.ldx = n0.ldx;
  }
}

// The activations the GEMMs of `parts` (one x, one weight dtype) read: the
// 16-bit copy of x (activations_16bit), or of x̂ = RMSNorm(x) when `norm`
// is given, normalized and rounded by one kernel (norm->normed is then not
// written: nothing reads x̂ in f32). F32 weights read f32 rows: x̂ then goes
// to norm->normed and the parts read it there.
std::shared_ptr<void> gemm_input(std::span<cpu::MatmulArgs> parts, const InputNorm* norm) {
  const cpu::MatmulArgs& a = parts[0];
  if (norm == nullptr) return detail::activations_16bit(a);
  if (a.wtype == DType::F32) {
    read_normalized(parts, *norm);
    return nullptr;
  }
  std::shared_ptr<void> x16 = allocate(size_t(a.n) * size_t(a.k) * 2);
  rms_norm_to_16bit({.x = a.x,
                     .weight = norm->weight,
                     .out = nullptr,
                     .n_rows = a.n,
                     .dim = a.k,
                     .x_stride = a.ldx,
                     .out_stride = a.k,
                     .eps = norm->eps},
                    x16.get(), a.wtype == DType::F16);
  return x16;
}

// `g` (its parts and fusions set) with x, n and k of `a` and what follows
// from them.
detail::GemvArgs launch_args(const cpu::MatmulArgs& a, detail::GemvArgs g) {
  g.x = a.x;
  g.ldx = a.ldx;
  g.n = int(a.n);
  g.k = a.k;
  g.m = 0;
  for (int p = 0; p < g.n_parts; ++p) g.m += g.parts[p].m;
  g.prefetch_rows = gemv_prefetch_rows(g);
  return g;
}

// One GEMV launch over `g` (x, n, k of `a`; its parts and fusions set), of
// x̂ = RMSNorm(x) when `norm` is given.
void gemv(const cpu::MatmulArgs& args, detail::GemvArgs g, const InputNorm* norm = nullptr) {
  cpu::MatmulArgs a = args;
  g = launch_args(a, g);
  if (norm != nullptr) {
    g.norm_w = norm->weight;
    g.norm_eps = norm->eps;
    // The norm the op before handed on (norm_handoff.h), when it can be read here.
    const detail::HandedNorm* handed = detail::handed_norm_for(norm->handed, a.x, norm->weight);
    if (handed != nullptr && detail::gemv_int8_handed(a.wtype, g, *handed)) return;
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
    CUDA_CHECK(cudaMemcpy2DAsync(aligned.get(), size_t(a.k) * 4, a.x, size_t(a.ldx) * 4, size_t(a.k) * 4, size_t(a.n),
                                 cudaMemcpyDeviceToDevice, detail::current_stream()));
    g.x = static_cast<const float*>(aligned.get());
    g.ldx = a.k;
  }
  detail::gemv_quant(a.wtype, g);
}

// Parts whose weights lie back to back (Q/K/V and gate/up:
// model/device_weights.cpp stacks them) take one GEMM over the stacked rows.
// Up to kStackedMaxRows the GEMMs stream weights, and one GEMM over 50 MB
// streams them faster than three over 33, 8 and 8 MB, each with its own
// ramp, tail and split-K reduction. Above it the GEMMs are compute bound and
// the stacked GEMM is taken only where it writes its outputs in place
// (`in_place`: Q/K/V side by side). There, timed (lt_gemm.cu), it beats the
// small GEMMs: K and V of the 8B prefill are half a wave of tiles each
// (2,048 rows: 141 µs against 96 + 32 + 32). Gate/up stacked into the 16-bit
// scratch SwiGLU reads gained nothing there (601–612 µs against 2 × 296).
// BRIOCHE_CUDA_STACKED_GEMM=0 turns it off (A/B runs).
constexpr int64_t kStackedMaxRows = 512;

bool stacked_gemm_takes(std::span<const cpu::MatmulArgs> parts, bool in_place = false) {
  static const bool on = env_switch_on("BRIOCHE_CUDA_STACKED_GEMM");
  if (!on || parts.size() < 2 || (parts[0].n > kStackedMaxRows && !in_place)) return false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const cpu::MatmulArgs &prev = parts[i - 1], &p = parts[i];
    if (p.w_row_bytes != prev.w_row_bytes || p.w != static_cast<const char*>(prev.w) + prev.m * prev.w_row_bytes)
      return false;
  }
  return true;
}

// Σm over the parts: the stacked weights' rows.
int64_t stacked_rows(std::span<const cpu::MatmulArgs> parts) {
  int64_t m = 0;
  for (const cpu::MatmulArgs& p : parts) m += p.m;
  return m;
}

// The parts (one x, weights back to back) as one matmul over their stacked
// weights: Σm rows.
cpu::MatmulArgs stacked(std::span<const cpu::MatmulArgs> parts) {
  cpu::MatmulArgs all = parts[0];
  all.m = stacked_rows(parts);
  return all;
}

// One GEMM of parts' x (x16: its 16-bit copy) against their stacked weights,
// into y [n, Σm] (row stride ldy); returns the stacked parts' arguments.
cpu::MatmulArgs stacked_gemm(std::span<const cpu::MatmulArgs> parts, const void* x16, float* y, int64_t ldy) {
  cpu::MatmulArgs all = stacked(parts);
  all.y = y;
  all.ldy = ldy;
  detail::weight_gemm(all, x16, 0.0f);
  return all;
}

// Whether the parts' outputs are adjacent column ranges of one buffer, in
// order (the model keeps q, k and v so): the stacked GEMM then writes them in
// place.
bool outputs_side_by_side(std::span<const cpu::MatmulArgs> parts) {
  for (size_t i = 1; i < parts.size(); ++i)
    if (parts[i].ldy != parts[0].ldy || parts[i].y != parts[i - 1].y + parts[i - 1].m) return false;
  return true;
}

// h16 = SwiGLU of the gate and up GEMMs of `pair` (x16: their input), the
// GEMMs writing 16-bit outputs, of the type they read (bf16; f16 for f16
// weights), side by side in one scratch [n, gate.m + up.m] (gate in columns
// [0, gate.m), up in [gate.m, gate.m + up.m): the stacked GEMM's output as it
// comes where it takes them, else the two GEMMs' columns), which the SwiGLU
// kernel reads. Against f32 outputs this halves what the GEMMs store and
// SwiGLU loads (Llama-3-8B at 2,048 rows: 235 MB → 117 MB each way), for one
// more rounding of gate and up (2^-8 relative for bf16). gate.y and up.y are
// not written.
void gemms_16bit_then_swiglu(std::span<const cpu::MatmulArgs> pair, const void* x16, void* h16, bool to_f16) {
  const cpu::MatmulArgs &gate = pair[0], &up = pair[1];
  BRIOCHE_CHECK(up.m == gate.m && up.wtype == gate.wtype, "matmul_swiglu_down: expected up weights shaped and typed ",
                "like gate's, got ", up.m, " rows of ", dtype_name(up.wtype), " against ", gate.m, " of ",
                dtype_name(gate.wtype));
  const int64_t ld = gate.m + up.m;
  std::shared_ptr<void> gate_up = allocate(size_t(gate.n) * size_t(ld) * 2);  // [n, gate.m + up.m] 16-bit
  char* const gate16 = static_cast<char*>(gate_up.get());
  char* const up16 = gate16 + gate.m * 2;
  if (stacked_gemm_takes(pair)) {
    detail::weight_gemm_16bit(stacked(pair), x16, gate16, ld);
  } else {
    detail::weight_gemm_16bit(gate, x16, gate16, ld);
    detail::weight_gemm_16bit(up, x16, up16, ld);
  }
  swiglu_16bit_to_16bit({.gate = gate16,
                         .up = up16,
                         .gate_stride = ld,
                         .up_stride = ld,
                         .n_rows = gate.n,
                         .dim = gate.m,
                         .f16 = gate.wtype == DType::F16},
                        h16, to_f16);
}

// Whether the gate and up GEMMs before a 16-bit SwiGLU output write 16-bit
// outputs too (gemms_16bit_then_swiglu). BRIOCHE_CUDA_GATE_UP_16BIT=0 keeps
// them f32, SwiGLU reading f32 and writing the 16-bit rows (A/B runs).
bool gate_up_16bit() {
  static const bool on = env_switch_on("BRIOCHE_CUDA_GATE_UP_16BIT");
  return on;
}

// For n > 8: the gate and up GEMMs of x (x̂ with `norm`), then SwiGLU into
// gate.y, or into the 16-bit rows h16 [n, gate.m] (f16 when to_f16) when
// given: from 16-bit GEMM outputs (gemms_16bit_then_swiglu; 16-bit or
// quantized weights), or with BRIOCHE_CUDA_GATE_UP_16BIT=0 from f32 ones.
// The f32 GEMMs take one stacked GEMM where it takes them.
void gemms_then_swiglu(const cpu::MatmulArgs& gate_args, const cpu::MatmulArgs& up_args, const InputNorm* norm,
                       void* h16, bool to_f16) {
  cpu::MatmulArgs pair[] = {gate_args, up_args};
  const cpu::MatmulArgs &gate = pair[0], &up = pair[1];
  std::shared_ptr<void> x16 = gemm_input(pair, norm);
  if (h16 != nullptr && gate_up_16bit()) return gemms_16bit_then_swiglu(pair, x16.get(), h16, to_f16);
  backend::cpu::SwigluArgs s{.gate = gate.y,
                             .up = up.y,
                             .out = gate.y,
                             .n_rows = gate.n,
                             .dim = gate.m,
                             .gate_stride = gate.ldy,
                             .up_stride = up.ldy,
                             .out_stride = gate.ldy};
  std::shared_ptr<void> gate_up;
  if (stacked_gemm_takes(pair)) {
    const int64_t m = stacked_rows(pair);
    gate_up = allocate(size_t(gate.n) * size_t(m) * 4);
    const cpu::MatmulArgs all = stacked_gemm(pair, x16.get(), static_cast<float*>(gate_up.get()), m);
    s.gate = all.y;
    s.up = all.y + gate.m;
    s.gate_stride = s.up_stride = all.ldy;
  } else {
    detail::weight_gemm(gate, x16.get(), 0.0f);
    detail::weight_gemm(up, x16.get(), 0.0f);
  }
  if (h16 != nullptr)
    swiglu_to_16bit(s, h16, to_f16);
  else
    cuda::swiglu(s);  // (not the CPU one, which ADL also finds)
}

}  // namespace

void matmul(const cpu::MatmulArgs& a) {
  if (a.n == 0 || a.m == 0) return;
  if (a.n > kMaxGemvRows) return gemm(a, 0.0f);
  gemv(a, {.parts = {gemv_part(a)}});
}

namespace {

// Whether the decode GEMV `g` over `a`'s weights (of x̂ with `norm`) adds
// the table's terms `lora` itself (gemv.cuh, GemvArgs::lora); if not, the
// expand kernel adds them after. gemv() may normalise x apart and launch
// without the norm; the streamed GEMV takes every launch without the norm
// that it takes with it, so asking with the norm set answers for both.
bool gemv_adds_lora(const cpu::MatmulArgs& a, detail::GemvArgs g, const InputNorm* norm,
                    const backend::cpu::LoraTableArgs& lora) {
  if (a.n > kMaxGemvRows || dtype_info(a.wtype).quantized) return false;
  g = launch_args(a, g);
  g.lora = lora;
  if (norm != nullptr) {
    g.norm_w = norm->weight;
    g.norm_eps = norm->eps;
  }
  return detail::gemv_stream_takes_lora(a.wtype, g);
}

}  // namespace

void matmul_accumulate(const cpu::MatmulArgs& a, NormHandOn hand_on, const backend::cpu::LoraTableArgs* lora) {
  BRIOCHE_CHECK(lora == nullptr || hand_on.norm_w == nullptr,
                "matmul_accumulate: expected no norm handoff request with adapter terms (the norm would miss ",
                "them), found both");
  if (a.n == 0 || a.m == 0) return;
  detail::GemvArgs g{.parts = {gemv_part(a)}, .accumulate = true, .hand_on = hand_on};
  if (lora != nullptr && !gemv_adds_lora(a, g, nullptr, *lora)) {
    matmul_accumulate(a, hand_on);
    return cuda::lora_table_expand(*lora);  // (not the CPU one, which ADL also finds)
  }
  if (a.n > kMaxGemvRows) return gemm(a, 1.0f);
  if (lora != nullptr) g.lora = *lora;
  gemv(a, g);
}

namespace detail {

GemvArgs accumulate_gemv_args(const cpu::MatmulArgs& a, NormHandOn hand_on) {
  return launch_args(a, {.parts = {gemv_part(a)}, .accumulate = true, .hand_on = hand_on});
}

}  // namespace detail

bool gemm_reads_16bit(const cpu::MatmulArgs& a) { return a.n > kMaxGemvRows && a.wtype != DType::F32; }

void matmul_accumulate_16bit(const cpu::MatmulArgs& a, const void* x16) {
  BRIOCHE_CHECK(gemm_reads_16bit(a), "matmul_accumulate_16bit: expected a GEMM that reads 16-bit rows (more than ",
                kMaxGemvRows, " rows, 16-bit or quantized weights), got ", a.n, " rows of ", dtype_name(a.wtype),
                " weights");
  if (a.m == 0) return;
  detail::weight_gemm(a, x16, 1.0f);
}

void matmul_swiglu(const cpu::MatmulArgs& gate_args, const cpu::MatmulArgs& up_args, const InputNorm* norm,
                   const backend::cpu::LoraTableArgs* lora) {
  BRIOCHE_CHECK(lora == nullptr || lora->swiglu_out == gate_args.y,
                "matmul_swiglu: expected the adapter terms' SwiGLU output to be gate's output ",
                static_cast<const void*>(gate_args.y), ", found ",
                static_cast<const void*>(lora == nullptr ? nullptr : lora->swiglu_out));
  if (gate_args.n == 0 || gate_args.m == 0) return;
  detail::GemvArgs g{.parts = {gemv_part(gate_args)}, .w_up = up_args.w};
  if (lora != nullptr && !gemv_adds_lora(gate_args, g, norm, *lora)) {
    const cpu::MatmulArgs gate_up[] = {gate_args, up_args};
    matmul_group(gate_up, norm);
    return cuda::lora_table_expand(*lora);  // (not the CPU one, which ADL also finds)
  }
  if (gate_args.n <= kMaxGemvRows) {
    if (lora != nullptr) g.lora = *lora;
    return gemv(gate_args, g, norm);
  }
  gemms_then_swiglu(gate_args, up_args, norm, nullptr, false);
}

void matmul_swiglu_down(const cpu::MatmulArgs& gate, const cpu::MatmulArgs& up, const cpu::MatmulArgs& down,
                        const SwigluDown& how) {
  const InputNorm* norm = how.norm;
  const bool accumulate = how.accumulate;
  // (f32 gate and up weights take f32 GEMMs: the two calls.)
  if (!gemm_reads_16bit(gate) || !gemm_reads_16bit(down) || gate.m == 0 || down.m == 0) {
    matmul_swiglu(gate, up, norm);
    if (accumulate)
      matmul_accumulate(down, how.hand_on);
    else
      cuda::matmul(down);  // (not the CPU one, which ADL also finds)
    return;
  }
  std::shared_ptr<void> h16 = allocate(size_t(gate.n) * size_t(gate.m) * 2);
  gemms_then_swiglu(gate, up, norm, h16.get(), down.wtype == DType::F16);
  detail::weight_gemm(down, h16.get(), accumulate ? 1.0f : 0.0f);
}

void matmul_group(std::span<const cpu::MatmulArgs> parts, const InputNorm* norm,
                  const backend::cpu::LoraTableArgs* lora) {
  BRIOCHE_CHECK(!parts.empty() && parts.size() <= 3, "matmul_group: 1 to 3 weights, got ", parts.size());
  const cpu::MatmulArgs& a = parts[0];
  bool shared = true;  // one x, one dtype: one GEMV launch or one conversion
  for (const cpu::MatmulArgs& p : parts)
    shared = shared && p.x == a.x && p.ldx == a.ldx && p.n == a.n && p.k == a.k && p.wtype == a.wtype;
  if (a.n == 0) return;
  detail::GemvArgs g{.n_parts = int(parts.size())};
  for (size_t i = 0; i < parts.size(); ++i) g.parts[i] = gemv_part(parts[i]);
  if (lora != nullptr && !(shared && gemv_adds_lora(a, g, norm, *lora))) {
    matmul_group(parts, norm);
    return cuda::lora_table_expand(*lora);  // (not the CPU one, which ADL also finds)
  }
  if (shared && a.n <= kMaxGemvRows) {
    if (lora != nullptr) g.lora = *lora;
    return gemv(a, g, norm);
  }
  std::array<cpu::MatmulArgs, 3> storage;  // (1 to 3 parts: no allocation per call)
  const std::span<cpu::MatmulArgs> group(storage.data(), parts.size());
  std::copy(parts.begin(), parts.end(), group.begin());
  if (!shared) {
    // Different dtypes or inputs: a matmul each, on x̂ normalized once.
    if (norm != nullptr) read_normalized(group, *norm);
    for (const cpu::MatmulArgs& p : group) cuda::matmul(p);  // not cpu::matmul, which ADL also finds
    return;
  }
  std::shared_ptr<void> x16 = gemm_input(group, norm);
  const bool in_place = outputs_side_by_side(group);
  const bool stacked = stacked_gemm_takes(group, in_place);
  if (stacked && in_place) {
    stacked_gemm(group, x16.get(), group[0].y, group[0].ldy);
    return;
  }
  if (stacked) {
    const int64_t m = stacked_rows(group);
    std::shared_ptr<void> y = allocate(size_t(a.n) * size_t(m) * 4);
    const cpu::MatmulArgs all = stacked_gemm(group, x16.get(), static_cast<float*>(y.get()), m);
    ColumnSplit split{.src = all.y, .src_stride = all.ldy, .n_rows = all.n, .n_parts = int(group.size())};
    for (size_t i = 0; i < group.size(); ++i) {
      split.dst[i] = group[i].y;
      split.dst_stride[i] = group[i].ldy;
      split.width[i] = group[i].m;
    }
    split_columns(split);
    return;
  }
  for (const cpu::MatmulArgs& p : group) detail::weight_gemm(p, x16.get(), 0.0f);
}

}  // namespace brioche::cuda
