// The many-row GEMMs against a frozen weight of any dtype, with the 16-bit
// copy of the activations made by the caller, so one conversion serves
// every GEMM that reads the same rows (Q/K/V, gate/up, a LoRA product next
// to its base weight). Shared by matmul.cu, linear_backward.cu and
// lora_matmul.cu (include from .cu files only).
#pragma once

#include <memory>

#include "backend/cpu/linear_backward.h"
#include "backend/cpu/matmul.h"

namespace brioche::cuda::detail {

// Largest bf16 tile an f16 or quantized weight is expanded into per GEMM:
// never the whole matrix.
constexpr size_t kWeightTileBytes = size_t(128) << 20;

// f32 rows x [n, k] (row stride ldx floats) as a new contiguous 16-bit copy:
// bf16, or f16 when `to_f16`.
std::shared_ptr<void> rows_to_16bit(const float* x, int64_t ldx, int64_t n, int64_t k, bool to_f16 = false);

// a.x as the 16-bit activations cuBLASLt takes ([n, k] contiguous; f16 for
// f16 weights, else bf16), or nothing for f32 weights (full f32 GEMM).
std::shared_ptr<void> activations_16bit(const cpu::MatmulArgs& a);

// a.y = a.x·wᵀ + beta·a.y, reading x16 (from activations_16bit(a)) instead
// of a.x; quantized weights expand to bf16 row tiles of ≤ 128 MB.
void weight_gemm(const cpu::MatmulArgs& a, const void* x16, float beta);

// The same GEMM (beta 0) with 16-bit outputs, of the type it reads (bf16; f16
// for f16 weights): y16 [n, m], row stride ldy16 values, each the f32 sum
// rounded once by cuBLASLt's epilogue. a.y is not written. 16-bit or quantized
// weights only (f32 weights read and write f32); quantized row tiles write
// their columns of y16.
void weight_gemm_16bit(const cpu::MatmulArgs& a, const void* x16, void* y16, int64_t ldy16);

// a.dx = a.dy·w + beta·a.dx for a 16-bit or quantized w, reading dy16 (a.dy
// as bf16 [n, m] contiguous) instead of a.dy. Quantized and f16 weights
// expand to bf16 tiles of weight rows (slices of the reduction dimension).
void weight_input_grad_gemm(const backend::cpu::MatmulInputGradArgs& a, const void* dy16, float beta);

}  // namespace brioche::cuda::detail
