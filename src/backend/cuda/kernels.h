// CUDA kernels behind the ops, taking the same argument structs as the CPU
// backend (backend/cpu/*.h) with device pointers for tensors. Host-side
// metadata (positions, ids, block tables, RoPE frequencies) stays host
// memory in the structs: the launchers upload it (upload_cached), so the ops
// layer dispatches with one line. Everything runs asynchronously on
// cuda::stream(). Plain C++ header: the kernels exist when BRIOCHE_CUDA=ON.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/add.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/causal_conv1d.h"
#include "backend/cpu/embedding.h"
#include "backend/cpu/gated_delta_rule.h"
#include "backend/cpu/lora_rows.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/rms_norm.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/sigmoid_gate.h"
#include "backend/cpu/swiglu.h"
#include "backend/cuda/norm_hand_on.h"

namespace brioche::cuda {

// y[n, m] = x[n, k] · w[m, k]ᵀ. n ≤ 8: GEMV kernels that read every weight
// byte once and dequantize in registers; larger n: cuBLASLt (bf16/f16/f32,
// quantized weights dequantized to bf16 tiles first).
void matmul(const cpu::MatmulArgs& args);
// Decode fusions (gemv.cuh), each one launch where it would be two or three:
// y += x·wᵀ (cuBLASLt with β = 1 for n > 8); `hand_on`: also write
// RMSNorm(y) for the next op where the GEMV can (ops::NormHandoff).
//
// `lora` (matmul_accumulate, matmul_swiglu, matmul_group): also the LoRA
// table's terms of the outputs (lora->y are the outputs, in order; for
// matmul_swiglu gate's and up's, with lora->swiglu_out = gate.y), added in
// the decode GEMV's store where it takes them (gemv.cuh), else by the
// table's expand kernel after the matmuls (matmul_swiglu then runs gate and
// up unfused and the SwiGLU expand). Not with a hand_on request: the norm
// would miss the terms.
void matmul_accumulate(const cpu::MatmulArgs& args, NormHandOn hand_on = {},
                       const backend::cpu::LoraTableArgs* lora = nullptr);

// The RMSNorm a matmul's x goes through first (ops::RmsNormFirst):
// x̂ = x · (mean(x²) + eps)^(−1/2) ⊙ weight. The decode GEMVs take it in
// their own prologue where they can (gemv.cuh); otherwise a norm kernel
// writes x̂ to `normed` ([n, k], row stride normed_stride; may be x itself)
// and the matmul reads it from there.
struct InputNorm {
  const float* weight;  // [k]
  float eps;
  float* normed;
  int64_t normed_stride;
  // The norm of x with `weight` that the op before wrote (a
  // detail::HandedNorm, NormHandOn::handed; norm_handoff.h), or null.
  const void* handed = nullptr;
};

// gate.y = silu(x·w_gateᵀ) ⊙ (x·w_upᵀ); `up` (same x, w shaped and typed
// like gate's) writes up.y only for n > 8, where the two GEMMs share one
// 16-bit conversion of x.
void matmul_swiglu(const cpu::MatmulArgs& gate, const cpu::MatmulArgs& up, const InputNorm* norm = nullptr,
                   const backend::cpu::LoraTableArgs* lora = nullptr);
// down.y += gate.y·w_downᵀ after matmul_swiglu(gate, up, norm) (down.x is
// gate.y): a Llama MLP with its residual add; with !accumulate down.y =
// gate.y·w_downᵀ (a tensor-parallel rank's partial sum). For n > 8 with 16-bit or
// quantized weights (gate's, up's and down's) it is the two calls without
// their f32 round trips: the gate and up GEMMs write 16-bit outputs (the
// type they read: bf16, f16 for f16 weights) into a scratch, and SwiGLU
// reads them and writes the 16-bit rows the down GEMM reads. So gate and up
// are rounded once more than in the two calls (2^-8 relative for bf16), and
// gate.y and up.y are not written (as InputNorm::normed is not).
// BRIOCHE_CUDA_GATE_UP_16BIT=0 keeps the GEMMs' outputs f32 (gate.y and
// up.y, or a stacked scratch). `hand_on` as matmul_accumulate's (with
// accumulate).
struct SwigluDown {
  const InputNorm* norm = nullptr;
  bool accumulate = true;
  NormHandOn hand_on;
};
void matmul_swiglu_down(const cpu::MatmulArgs& gate, const cpu::MatmulArgs& up, const cpu::MatmulArgs& down,
                        const SwigluDown& how = {});
// y_i = x·w_iᵀ for 1–3 weights (Q, K, V): one GEMV launch for n ≤ 8, one
// conversion of x for the GEMMs above, when they share x and dtype.
void matmul_group(std::span<const cpu::MatmulArgs> parts, const InputNorm* norm = nullptr,
                  const backend::cpu::LoraTableArgs* lora = nullptr);

void rms_norm(const backend::cpu::RmsNormArgs& args);
// The same x̂, rounded to bf16 (f16 when to_f16) into out [n_rows, dim]
// contiguous (args.out unused): the 16-bit rows a GEMM reads, in one kernel.
void rms_norm_to_16bit(const backend::cpu::RmsNormArgs& args, void* out, bool to_f16);
void rope(const backend::cpu::RopeArgs& args);
void add(const backend::cpu::AddArgs& args);
void add_bias(float* x, const float* bias, int64_t n_rows, int64_t dim, int64_t x_stride);
void swiglu(const backend::cpu::SwigluArgs& args);
// The same, written as bf16 (f16 when to_f16) [n_rows, dim] contiguous (args'
// own out is ignored): rows only tensor-core GEMMs read (the down projection,
// the training MLP's lora_matmul). The same f32 arithmetic, rounded to
// nearest even once at the store, as convert_rows_to_16bit rounds.
void swiglu_to_16bit(const backend::cpu::SwigluArgs& args, void* out, bool to_f16);
// Gate and up as 16-bit rows: the outputs of GEMMs that write the type they
// read (bf16; f16 for f16 weights), as matmul_swiglu_down's gate/up GEMMs
// write them above 8 rows.
struct Swiglu16bitArgs {
  const void* gate;  // [n_rows, dim], row stride gate_stride values
  const void* up;    // [n_rows, dim], row stride up_stride values
  int64_t gate_stride, up_stride, n_rows, dim;
  bool f16;  // gate and up are f16 (else bf16)
};
// silu(gate)·up with swiglu's f32 formula on the 16-bit values widened
// exactly, rounded to nearest even once into out [n_rows, dim] contiguous:
// bf16, or f16 when to_f16 (the down GEMM's type, which may differ from
// gate's).
void swiglu_16bit_to_16bit(const Swiglu16bitArgs& args, void* out, bool to_f16);
// dst[p] [n_rows, width[p]] (row stride dst_stride[p]) = the columns
// [Σ_{i<p} width[i], + width[p]) of src [n_rows, Σ width] (row stride
// src_stride), for up to 3 parts: the outputs of one GEMM over stacked
// weights (matmul_group).
struct ColumnSplit {
  const float* src;
  int64_t src_stride, n_rows;
  int n_parts;
  float* dst[3];
  int64_t dst_stride[3], width[3];
};
void split_columns(const ColumnSplit& split);
void softmax(float* x, int64_t n_rows, int64_t n, int64_t stride);
// Ids are validated on the host first (an error names the bad id).
void embedding(const cpu::EmbeddingArgs& args);

void store_kv(const backend::cpu::StoreKvArgs& args);
// rope(q), rope(k), then store_kv(kv), in one kernel (kv's K is k's rows):
// what a decode step does between the QKV projection and attention.
void rope_store_kv(const backend::cpu::RopeArgs& q, const backend::cpu::RopeArgs& k,
                   const backend::cpu::StoreKvArgs& kv);
// Where attention writes its output: args.out's f32 rows, or instead, when
// `rows` is set, 16-bit rows [n_rows, n_heads·head_dim] contiguous for a GEMM
// to read (bf16, or f16 when f16), each value args.out's rounded to nearest
// even. Rows no sequence covers are not written either way.
struct AttentionOut16 {
  void* rows = nullptr;
  bool f16 = false;
};
// Split over the KV length when few (row, kv head) pairs would fill the GPU.
void paged_attention(const backend::cpu::PagedAttentionArgs& args, AttentionOut16 out16 = {});
// rope_store_kv(q, k, kv), then paged_attention(args) reading q's rows. When
// every row is a sequence's one new token (a decode step), the attention
// kernel does both: q rotated in registers, the newest key rotated and
// stored with its value by the CTA that attends to it; q and k stay
// unrotated in memory. Otherwise the two launches.
void rope_store_kv_attention(const backend::cpu::RopeArgs& q, const backend::cpu::RopeArgs& k,
                             const backend::cpu::StoreKvArgs& kv, const backend::cpu::PagedAttentionArgs& args,
                             AttentionOut16 out16 = {});
// Whether rope_store_kv_attention_accumulate takes `projection` after
// attention of this head_dim: a GEMV of ≤ 8 rows on the int8 path
// (gemv_int8.h: Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K), head_dim a multiple of
// 32. BRIOCHE_CUDA_ATTENTION_INT8=0 turns it off (A/B runs).
bool attention_quantizes_for(const cpu::MatmulArgs& projection, int head_dim);
// rope_store_kv_attention(q, k, kv, args), then matmul_accumulate(projection)
// of its output (projection.x is args.out): the attention's last kernel
// writes the output as the int8 blocks the GEMV reads, with the bits of the
// GEMV's own quantization kernel, which then does not run. args.out is not
// written. Needs attention_quantizes_for(projection, args.head_dim).
// `hand_on` as matmul_accumulate's.
void rope_store_kv_attention_accumulate(const backend::cpu::RopeArgs& q, const backend::cpu::RopeArgs& k,
                                        const backend::cpu::StoreKvArgs& kv,
                                        const backend::cpu::PagedAttentionArgs& args, const cpu::MatmulArgs& projection,
                                        NormHandOn hand_on = {});
// Whether the matmul `a` is a GEMM reading x as 16-bit rows (bf16; f16 for
// f16 weights): above 8 rows, for 16-bit or quantized weights.
bool gemm_reads_16bit(const cpu::MatmulArgs& a);
// y += x·wᵀ (matmul_accumulate above 8 rows) where x comes as the 16-bit rows
// x16 [n, k] contiguous that the GEMM reads (bf16; f16 for f16 weights), as
// paged_attention's AttentionOut16 writes them. a.x is not read. Needs
// gemm_reads_16bit(a).
void matmul_accumulate_16bit(const cpu::MatmulArgs& a, const void* x16);

// ids[r] = argmax_j logits[r, j] (first maximum), copied back to the host.
//   logits : device f32 [n_rows, n], row stride `stride` floats
void argmax_rows(const float* logits, int64_t n_rows, int64_t n, int64_t stride, std::span<int32_t> ids);

// Dequantizes rows [row_begin, row_end) of a weight of any dtype to bf16:
//   w   : [m, k] rows of wtype, row stride w_row_bytes
//   out : bf16 [row_end - row_begin, k], contiguous
void dequantize_to_bf16(DType wtype, const void* w, size_t w_row_bytes, int64_t row_begin, int64_t row_end, int64_t k,
                        void* out);
// out[i] = bf16(x[i]) (or f16 when `to_f16`) for rows of an f32 matrix.
struct ConvertRowsArgs {
  const float* x;  // [n, k], row stride ldx floats
  int64_t ldx, n, k;
  void* out;  // [n, k] contiguous 16-bit values
  bool to_f16;
};
void convert_rows_to_16bit(const ConvertRowsArgs& args);
// out[i] = f32(x[i]) for n contiguous bf16 values (exact).
void bf16_to_f32(const void* x, int64_t n, float* out);

// Qwen 3.5's linear-attention layers and gates (ops/causal_conv1d.h,
// ops/gated_delta_rule.h, ops/sigmoid_gate.h). The sequences'
// rows, slots, splits and checkpoints are host memory, uploaded as a plan.
// causal_conv1d_silu: a thread per (sequence, channel), the window in registers.
void causal_conv1d_silu(const backend::cpu::CausalConv1dArgs& args);
// gated_delta_rule: a CTA per (sequence, value head), the state in shared
// memory; the CPU kernel's pieces, each in the chunked form.
void gated_delta_rule(const backend::cpu::GatedDeltaRuleArgs& args);
void delta_rule_gates(const backend::cpu::DeltaRuleGatesArgs& args);
void sigmoid_gate(const backend::cpu::SigmoidGateArgs& args);

}  // namespace brioche::cuda
