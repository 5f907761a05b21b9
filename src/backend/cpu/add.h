// CPU element-wise additions.
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

struct AddArgs {
  const float* a;  // [n_rows, dim], row strides in floats
  const float* b;
  float* out;
  int64_t n_rows, dim, a_stride, b_stride, out_stride;
};

// out = a + b
void add(const AddArgs& args);

// x[r, :] += bias
void add_bias(float* x, const float* bias, int64_t n_rows, int64_t dim, int64_t x_stride);

}  // namespace brioche::backend::cpu
