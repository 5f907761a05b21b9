// CPU kernel of ops::causal_conv1d_silu (see ops/causal_conv1d.h for the math).
#pragma once

#include <cstdint>
#include <span>

#include "ops/recurrent_sequence.h"

namespace brioche::backend::cpu {

struct CausalConv1dArgs {
  const float* x;       // [n_rows, channels], row stride x_stride floats
  const float* weight;  // [channels, kernel]
  float* state;         // [n_slots, kernel - 1, channels]
  float* out;           // [n_rows, channels], row stride out_stride floats
  int64_t x_stride, out_stride;
  int channels, kernel;
  std::span<const ops::RecurrentSequence> sequences;
};

void causal_conv1d_silu(const CausalConv1dArgs& args);

}  // namespace brioche::backend::cpu
