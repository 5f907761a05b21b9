// CPU RoPE kernel (see ops/rope.h for the math and the pairings).
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

struct RopeArgs {
  float* x;                  // [n_rows, n_heads * head_dim], row stride x_stride floats
  const int32_t* positions;  // [n_rows]
  const float* inv_freq;     // [head_dim / 2]
  int64_t n_rows, x_stride;
  int n_heads, head_dim;
  bool interleaved;  // pairs (2i, 2i+1) instead of (i, i + head_dim/2)
};

void rope(const RopeArgs& args);

}  // namespace brioche::backend::cpu
