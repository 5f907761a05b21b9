// What the RoPE kernel and the fused RoPE + K/V store of a decode step
// share: the device tables of a call and the rotation of one pair.
#pragma once

#include <cstdint>

#include "backend/cpu/rope.h"

namespace brioche::cuda::detail {

// The device copies a RoPE launch reads: positions (the decode binding's
// when one is bound, which must have a's rows; else uploaded) and the
// inverse frequencies. Errors name `op`. Defined in elementwise.cu.
struct RopeTables {
  const int32_t* positions;
  const float* inv_freq;
};
RopeTables rope_tables(const backend::cpu::RopeArgs& a, const char* op);

}  // namespace brioche::cuda::detail

#ifdef __CUDACC__
namespace brioche::cuda::detail {

// Rotates pair i of the head at `x` (head_dim values) by position·inv_freq[i]
// and returns the pair's indices in the head. The angle is rounded to f32
// before sin/cos, as the CPU reference does.
__device__ __forceinline__ int2 rope_pair(float* x, int head_dim, bool interleaved, int i, int32_t position,
                                          const float* inv_freq) {
  const float angle = float(position) * inv_freq[i];
  float s, c;
  sincosf(angle, &s, &c);
  const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + head_dim / 2;
  const float x0 = x[i0], x1 = x[i1];
  x[i0] = x0 * c - x1 * s;
  x[i1] = x0 * s + x1 * c;
  return make_int2(i0, i1);
}

}  // namespace brioche::cuda::detail
#endif
