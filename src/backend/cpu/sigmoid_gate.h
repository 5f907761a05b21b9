// CPU kernel of ops::sigmoid_gate: x ← x · sigmoid(gate).
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

struct SigmoidGateArgs {
  const float* gate;  // [n_rows, dim] or [n_rows, 1], row stride gate_stride floats
  float* x;           // [n_rows, dim], row stride x_stride floats
  int64_t n_rows, dim, gate_stride, x_stride;
  bool per_row;  // one gate value per row
};

void sigmoid_gate(const SigmoidGateArgs& args);

struct SigmoidGateBackwardArgs {
  const float *gate, *x, *dy;
  float *dx, *dgate;  // dx may alias dy
  int64_t n_rows, dim, gate_stride, x_stride, dy_stride, dx_stride, dgate_stride;
  bool per_row;
};

void sigmoid_gate_backward(const SigmoidGateBackwardArgs& args);

}  // namespace brioche::backend::cpu
