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

struct GeluTanhMulBackwardArgs {
  const float* gate;  // [n_rows, dim] the forward's gate, row stride gate_stride floats
  const float* up;    // [n_rows, dim] the forward's up, row stride up_stride floats
  const float* dout;  // [n_rows, dim] d loss / d out, row stride dout_stride floats
  float* dgate;       // [n_rows, dim] written, row stride dgate_stride (may alias dout)
  float* dup;         // [n_rows, dim] written, row stride dup_stride; null: not wanted
  int64_t n_rows, dim, gate_stride, up_stride, dout_stride, dgate_stride, dup_stride;
};

// dgate = dout · up · gelu_tanh'(gate),  dup = dout · gelu_tanh(gate)
void gelu_tanh_mul_backward(const GeluTanhMulBackwardArgs& args);

struct SoftcapArgs {
  float* x;  // [n_rows, dim], row stride x_stride floats
  int64_t n_rows, dim, x_stride;
  float cap;
};

// x = cap · tanh(x / cap)
void softcap(const SoftcapArgs& args);

}  // namespace brioche::backend::cpu
