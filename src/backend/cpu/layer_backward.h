// CPU kernels of the element-wise layer backwards (see ops/layer_backward.h).
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

struct RmsNormBackwardArgs {
  const float* x;       // [n_rows, dim], row stride x_stride
  const float* weight;  // [dim]
  const float* dy;      // [n_rows, dim], row stride dy_stride
  float* dx;            // [n_rows, dim], row stride dx_stride; accumulated
  int64_t n_rows, dim, x_stride, dy_stride, dx_stride;
  float eps;
};
void rms_norm_backward(const RmsNormBackwardArgs& args);

struct SwigluBackwardArgs {
  const float* gate;  // [n_rows, dim] (stride ld for all five)
  const float* up;
  const float* dout;
  float* dgate;  // may alias dout
  float* dup;
  int64_t n_rows, dim, ld_gate, ld_up, ld_dout, ld_dgate, ld_dup;
};
void swiglu_backward(const SwigluBackwardArgs& args);

}  // namespace brioche::backend::cpu
