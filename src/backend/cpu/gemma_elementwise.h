// CPU kernels of Gemma's element-wise ops: the GELU (tanh form) gate and
// soft-capping (ops/gelu_tanh.h, ops/softcap.h).
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

struct GeluTanhMulArgs {
  const float* gate;  // [n_rows, dim], row stride gate_stride floats
  const float* up;    // [n_rows, dim], row stride up_stride floats
  float* out;         // [n_rows, dim], row stride out_stride floats
  int64_t n_rows, dim, gate_stride, up_stride, out_stride;
};

// out = gelu_tanh(gate) · up
void gelu_tanh_mul(const GeluTanhMulArgs& args);

struct SoftcapArgs {
  float* x;  // [n_rows, dim], row stride x_stride floats
  int64_t n_rows, dim, x_stride;
  float cap;
};

// x = cap · tanh(x / cap)
void softcap(const SoftcapArgs& args);

}  // namespace brioche::backend::cpu
