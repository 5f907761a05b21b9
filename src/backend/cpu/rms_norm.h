// CPU RMSNorm kernel (see ops/rms_norm.h for the math).
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

struct RmsNormArgs {
  const float* x;       // [n_rows, dim], row stride x_stride floats
  const float* weight;  // [dim]
  float* out;           // [n_rows, dim], row stride out_stride floats
  int64_t n_rows, dim, x_stride, out_stride;
  float eps;
};

void rms_norm(const RmsNormArgs& args);

}  // namespace brioche::backend::cpu
