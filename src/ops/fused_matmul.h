// Matmuls fused with the ops around them in a transformer block. On the GPU's
// decode path (≤ 8 rows) each is one launch where the plain ops take two or
// three (a decode step is a few hundred small launches, so they add up);
// above 8 rows on the GPU the GEMMs read their inputs as 16-bit rows, which
// the op before them (the norm, SwiGLU) writes directly instead of f32 rows
// and a conversion; on the CPU each runs as the plain ops in sequence, with
// `scratch` holding the intermediate. Results match the unfused ops up to
// float summation order.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/matmul.h"
#include "core/tensor.h"
#include "ops/norm_handoff.h"

namespace brioche::ops {

struct LoraTerms;  // ops/lora_rows.h

// `lora` (matmul_accumulate, matmul_group and swiglu_matmul of x̂): the
// served adapters' low-rank terms of the outputs too, their shrink already
// run (ops/lora_rows.h, LoraTerms): y = x·wᵀ + the row's adapter term,
// before the SwiGLU for gate and up. On the GPU's decode path the GEMV adds
// them in its store; elsewhere the table's expand runs after the base.
//
// `read_ahead` (matmul_accumulate, matmul_group; the CPU's served adapters,
// ops/lora_rows.h: the factors the op after the base projection reads):
// bytes requested from memory while the projection's dot products run
// (backend/cpu/read_ahead.h, ByteRange). The same results; on another
// device nothing is requested.

// What matmul_accumulate does beside y += x·wᵀ; each defaults to nothing.
struct AccumulateWith {
  // The handoff whose request for y this op answers, handing on RMSNorm(y)
  // where it can (ops/norm_handoff.h); not with `lora`.
  NormHandoff* hand_on = nullptr;
  const LoraTerms* lora = nullptr;
  std::span<const cpu::ByteRange> read_ahead;
};

// y += x·wᵀ (a residual add).           x [n, k], w [m, k], y and scratch [n, m]
void matmul_accumulate(const Tensor& x, const Tensor& w, Tensor& y, Tensor& scratch, const AccumulateWith& with = {});

// The two weights of a SwiGLU: gate and up, [inter, k] of one dtype.
struct GateUpWeights {
  const Tensor& gate;
  const Tensor& up;
};

// out = silu(x·w.gateᵀ) ⊙ (x·w.upᵀ).    out and scratch [n, inter]
void swiglu_matmul(const Tensor& x, const GateUpWeights& w, Tensor& out, Tensor& scratch);

// ys[i] = x·ws[i]ᵀ for 1–3 weights (Q, K and V), one launch when they share a
// dtype.
void matmul_group(const Tensor& x, std::span<const Tensor* const> ws, std::span<Tensor* const> ys,
                  const LoraTerms* lora = nullptr, std::span<const cpu::ByteRange> read_ahead = {});

// The RMSNorm a block applies to x before its first matmuls:
// x̂ = x · (mean(x²) + eps)^(−1/2) ⊙ weight. The ops below taking it multiply
// x̂ instead of x. `normed` ([n, k] f32 like x, or x itself) receives x̂
// where x̂ is materialised in f32 (the CPU, f32 weights, shapes the GPU
// kernels do not fuse); on the GPU the decode GEMV normalizes x in its own
// prologue and, for more rows, one kernel writes the 16-bit x̂ the GEMMs
// read, both bit for bit as ops::rms_norm does, and `normed` is not written.
// `handoff`: where the op before may have handed on x̂ (ops/norm_handoff.h);
// the op reads it from there instead of normalizing x (on the GPU's
// one-row decode path), and fails when what it holds is not x̂ of this x.
struct RmsNormFirst {
  const Tensor& weight;  // [k] f32
  float eps;
  Tensor& normed;
  NormHandoff* handoff = nullptr;
};

// matmul_group of x̂; lora's parts write ys, in order.
void matmul_group(const Tensor& x, const RmsNormFirst& norm, std::span<const Tensor* const> ws,
                  std::span<Tensor* const> ys, const LoraTerms* lora = nullptr);
// swiglu_matmul of x̂; lora's parts are gate's (y: out) and up's (y: scratch).
void swiglu_matmul(const Tensor& x, const RmsNormFirst& norm, const GateUpWeights& w, Tensor& out, Tensor& scratch,
                   const LoraTerms* lora = nullptr);

// Where swiglu_mlp puts its result: added to y (the block's residual add), or
// written to y (a tensor-parallel rank's partial sum, added to the residual
// after the all-reduce).
enum class MlpOutput : uint8_t { AddToY, WriteY };

// A Llama MLP's weights, its buffers and where its result goes.
struct SwigluMlp {
  const Tensor& w_gate;  // [inter, k]
  const Tensor& w_up;    // [inter, k], w_gate's dtype
  const Tensor& w_down;  // [m, inter]
  Tensor& hidden;        // [n, inter]  the SwiGLU's output
  Tensor& scratch;       // [n, inter]  the up projection
  Tensor& y_scratch;     // [n, m]      matmul_accumulate's scratch (unused with WriteY)
  MlpOutput output = MlpOutput::AddToY;
};

// y += (silu(x̂·w_gateᵀ) ⊙ (x̂·w_upᵀ))·w_downᵀ: a Llama MLP block with its
// residual add (y may be x); with MlpOutput::WriteY, y = that product
// (y_scratch unused). It is swiglu_matmul(x, norm, {w_gate, w_up}, hidden,
// scratch), then matmul_accumulate(hidden, w_down, y, y_scratch) (WriteY:
// matmul(hidden, w_down, y)); on the GPU above 8 rows (16-bit or quantized
// weights) the gate and up GEMMs write 16-bit outputs, which the SwiGLU
// kernel reads to write the 16-bit rows the down GEMM reads: gate and up are
// rounded to 16 bits once more than in those two ops (2^-8 relative for
// bf16), and `hidden` and `scratch` are not written. norm.handoff is read
// for x̂ (as matmul_group's) and, with AddToY, its request for y answered
// by down (as matmul_accumulate's hand_on).
void swiglu_mlp(const Tensor& x, const RmsNormFirst& norm, const SwigluMlp& mlp, Tensor& y);

}  // namespace brioche::ops
