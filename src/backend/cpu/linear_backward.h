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

}  // namespace brioche::backend::cpu
