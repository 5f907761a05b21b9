// CPU SwiGLU kernel: out = silu(gate) · up.
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

struct SwigluArgs {
  const float* gate;  // [n_rows, dim], row stride gate_stride floats
  const float* up;    // [n_rows, dim], row stride up_stride floats
  float* out;         // [n_rows, dim], row stride out_stride floats
  int64_t n_rows, dim, gate_stride, up_stride, out_stride;
};

void swiglu(const SwigluArgs& args);

}  // namespace brioche::backend::cpu
