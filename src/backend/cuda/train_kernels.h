// CUDA kernels of the training ops (ops/layer_backward.h, linear_backward.h,
// dropout.h, scaled_add.h, gather_rows.h, logp_head.h, adamw.h), taking the
// CPU backend's argument structs with device pointers; host metadata (row
// indices, targets) stays host memory and is uploaded by the launchers.
// Everything runs asynchronously on cuda::stream() unless it returns a value.
// Plain C++ header: the kernels exist when BRIOCHE_CUDA=ON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cpu/adamw.h"
#include "backend/cpu/layer_backward.h"
#include "backend/cpu/linear_backward.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/swiglu.h"
#include "backend/cpu/train_rows.h"
#include "core/dtype.h"

namespace brioche::cuda {

// One block per row; the two row sums (Σx², Σ w·dy·x) in f32 per thread,
// reduced over the block.
void rms_norm_backward(const backend::cpu::RmsNormBackwardArgs& args);
void swiglu_backward(const backend::cpu::SwigluBackwardArgs& args);
// SwiGLU's backward writing bf16 [n_rows, dim] contiguous (args' own dgate /
// dup are ignored): the training MLP's gradients that only tensor-core GEMMs
// read (ops::lora_matmul), as swiglu_to_16bit (kernels.h) for the forward.
// The same f32 arithmetic, rounded once at the store. dout is read in full
// first, so neither output may overlap it.
void swiglu_backward_to_bf16(const backend::cpu::SwigluBackwardArgs& args, void* dgate, void* dup);

// dx (=|+=) dy·w through cuBLASLt: bf16 weights with a bf16 copy of dy
// (bf16 keeps f32's exponent range, so small gradients do not underflow as
// they would in f16); f16 and quantized weights expanded to bf16 row tiles of
// at most 128 MB (the reduction dimension is split over tiles, β = 1 after
// the first); f32 weights (LoRA factors) in full f32. f32 accumulation.
void matmul_input_grad(const backend::cpu::MatmulInputGradArgs& args);
// dw += dyᵀ·x in full f32 (CUBLAS_COMPUTE_32F, no TF32): the LoRA factor
// gradients have a rank-sized side, so these GEMMs are bound by reading dy
// and x (≈ 8 flop/byte), and TF32's 10-bit inputs would cost 1e-3 relative
// error on the only trained parameters for no speed.
void matmul_weight_grad(const backend::cpu::MatmulWeightGradArgs& args);
// Rows [row_begin, row_end) of a weight of any 16-bit or quantized dtype as
// bf16 [row_end − row_begin, k] contiguous (f16 of any width; quantized via
// dequantize_to_bf16, k a multiple of 32).
void weight_rows_to_bf16(DType wtype, const void* w, size_t w_row_bytes, int64_t row_begin, int64_t row_end, int64_t k,
                         void* out);

// ops::lora_matmul / lora_matmul_backward on tensor cores (the math and the
// rounding: ops/lora_matmul.h). The parts share x (base.x forward, `x`
// backward) and, backward, dx (base.dx; parts[0].base.accumulate says
// whether dx is added to). Widths are multiples of 8, n > 8, weights bf16 or
// quantized; any rank. x16 / dy16, when given, are x / dy already in bf16
// ([n, width] contiguous): used as they are, and the f32 pointer is unread.
struct LowRankArgs {
  const float* a = nullptr;  // [r, in] contiguous; nullptr: no low-rank term
  const float* b = nullptr;  // [out, r] contiguous
  int64_t r = 0;
  float scale = 0.0f;
};
struct LoraMatmulPartArgs {
  cpu::MatmulArgs base;  // y = x·wᵀ
  LowRankArgs low_rank;
  float* u;  // [n, r], row stride ld_u, written
  int64_t ld_u;
};
void lora_matmul(std::span<const LoraMatmulPartArgs> parts, const void* x16 = nullptr);
struct LoraMatmulGradPartArgs {
  backend::cpu::MatmulInputGradArgs base;  // dx (=|+=) dy·w
  LowRankArgs low_rank;
  const float* u;  // [n, r], row stride ld_u
  int64_t ld_u;
  float* grad_a;  // [r, in] contiguous, +=
  float* grad_b;  // [out, r] contiguous, +=
  const void* dy16 = nullptr;
};
void lora_matmul_backward(const float* x, int64_t ldx, std::span<const LoraMatmulGradPartArgs> parts,
                          const void* x16 = nullptr);

void dropout(const backend::cpu::DropoutArgs& args);
void add_scaled(const backend::cpu::ScaledAddArgs& args);
void scale(const backend::cpu::ScaleArgs& args);
void fill(const backend::cpu::ScaleArgs& args);  // x = args.s
void gather_rows(const backend::cpu::RowIndexArgs& args);
// Grouped by destination row on the host (rows are host data): each
// destination row sums its sources in ascending i, no atomics.
void scatter_add_rows(const backend::cpu::RowIndexArgs& args);

struct LogpHeadDeviceArgs {
  const float* hidden;  // [n, H], row stride ldh floats
  int64_t ldh, n, H;
  DType wtype;
  const void* w;  // [vocab, H] rows of wtype, row stride w_row_bytes
  size_t w_row_bytes;
  int64_t vocab;
  const int32_t* targets;  // [n] host memory
  int64_t chunk;
};
// lse, logp : [n] device, written.
void logp_head_forward(const LogpHeadDeviceArgs& args, float* lse, float* logp);
// d_hidden [n, H] (row stride ld_dh) = or += Σ_v dz·W_v.
void logp_head_backward(const LogpHeadDeviceArgs& args, const float* lse, const float* d_logp, float* d_hidden,
                        int64_t ld_dh, bool accumulate);

// One launch for every tensor (a table of pointers uploaded once per call).
void adamw_step(std::span<const backend::cpu::AdamWTensor> tensors, const backend::cpu::AdamWConstants& k);
// Fixed grid of f64 per-block partials, summed in order: deterministic.
double sum_of_squares(std::span<const backend::cpu::F32Block> blocks);

}  // namespace brioche::cuda
