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
  // W's AMX tiles for AmxWeightProduct::InputGrad, where amx_weight_products
  // holds and they were made (ops/amx_weight_tiles.h); else decoded per call.
  const uint16_t* w_tiles = nullptr;
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

// Whether a product through w [m, k] with n rows of activations runs on AMX
// bf16 tiles (amx_gemm.h; bf16 inputs, f32 sums, the CUDA path's
// tensor-core arithmetic, closer to x·wᵀ than the int8 activations of
// cpu::matmul's quantized path): a quantized w on a CPU with AMX active.
bool amx_weight_products(DType wtype, int64_t n, int64_t m, int64_t k);

// A training forward's y = x·wᵀ ([n, k]·[m, k]ᵀ) on AMX where
// amx_weight_products holds; else returns false, doing nothing, and the
// caller runs cpu::matmul.
struct TrainingMatmulArgs {
  const float* x;  // [n, k], row stride ldx floats
  int64_t ldx;
  DType wtype;
  const void* w;  // [m, k] rows of wtype, row stride w_row_bytes
  size_t w_row_bytes;
  float* y;  // [n, m], row stride ldy floats
  int64_t ldy;
  int64_t n, m, k;
  const uint16_t* w_tiles = nullptr;  // AmxWeightProduct::Forward tiles, as MatmulInputGradArgs'
};
bool training_matmul_amx(const TrainingMatmulArgs& args);

}  // namespace brioche::backend::cpu
