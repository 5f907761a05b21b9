// CPU kernels of the matmul backward (see ops/linear_backward.h for the math).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace brioche::backend::cpu {

struct MatmulInputGradArgs {
  const float* dy;  // [n, m], row stride ld_dy floats
  DType wtype;
  const void* w;  // [m, k] rows of wtype, row stride w_row_bytes
  size_t w_row_bytes;
  float* dx;  // [n, k], row stride ld_dx floats
  int64_t ld_dy, ld_dx;
  int64_t n, m, k;
  bool accumulate;
};
void matmul_input_grad(const MatmulInputGradArgs& args);

struct MatmulWeightGradArgs {
  const float* dy;  // [n, m], row stride ld_dy
  const float* x;   // [n, k], row stride ld_x
  float* dw;        // [m, k], row stride ld_dw; accumulated
  int64_t ld_dy, ld_x, ld_dw;
  int64_t n, m, k;
};
void matmul_weight_grad(const MatmulWeightGradArgs& args);

// A training forward's y = x·wᵀ ([n, k]·[m, k]ᵀ, any weight dtype) on AMX:
// the weight decoded to f32 once, one split-bf16 GEMM (amx_gemm.h, about
// f32 accuracy: closer to x·wᵀ than the int8 activations of cpu::matmul's
// quantized path). Returns false, doing nothing, where AMX is not active or
// n < 8; the caller then runs cpu::matmul.
struct TrainingMatmulArgs {
  const float* x;  // [n, k], row stride ldx floats
  int64_t ldx;
  DType wtype;
  const void* w;  // [m, k] rows of wtype, row stride w_row_bytes
  size_t w_row_bytes;
  float* y;  // [n, m], row stride ldy floats
  int64_t ldy;
  int64_t n, m, k;
};
bool training_matmul_amx(const TrainingMatmulArgs& args);

}  // namespace brioche::backend::cpu
