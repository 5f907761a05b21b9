// CPU kernel of ops::causal_conv1d_silu_backward (see ops/causal_conv1d_backward.h).
#pragma once

#include <cstdint>
#include <span>

#include "ops/recurrent_sequence.h"

namespace brioche::backend::cpu {

struct CausalConv1dBackwardArgs {
  const float *x, *weight, *dout;  // x, dout: rows with the strides below (floats); weight [channels, kernel]
  float* dx;
  int64_t n_rows, x_stride, dout_stride, dx_stride;
  int channels, kernel;
  std::span<const ops::RecurrentSequence> sequences;
  // [n_slots, kernel − 1, channels] per sequence slot, or null: the inputs
  // before a sequence that does not start (read), and their gradient
  // (written for those sequences).
  const float* state = nullptr;
  float* d_state = nullptr;
};

void causal_conv1d_silu_backward(const CausalConv1dBackwardArgs& args);

}  // namespace brioche::backend::cpu
