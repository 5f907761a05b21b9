// What the RoPE kernels share (rope, the fused RoPE + K/V store, and the
// paged attention that takes that step in): the device tables of a call and
// the rotation of one pair.
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

// cos and sin of the angle position·inv_freq, rounded to f32 before sin/cos
// as the CPU reference does.
__device__ __forceinline__ float2 rope_angle(int32_t position, float inv_freq) {
  float s, c;
  sincosf(float(position) * inv_freq, &s, &c);
  return make_float2(c, s);
}

// Pair (x0, x1) rotated by the angle with cos/sin `cs`. Every RoPE kernel
// rotates through here, so they agree to the bit.
__device__ __forceinline__ float2 rope_apply(float x0, float x1, float2 cs) {
  return make_float2(x0 * cs.x - x1 * cs.y, x0 * cs.y + x1 * cs.x);
}

// Rotates pair i of the head at `x` (head_dim values) and returns the pair's
// indices in the head.
__device__ __forceinline__ int2 rope_pair(float* x, int head_dim, bool interleaved, int i, int32_t position,
                                          const float* inv_freq) {
  const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + head_dim / 2;
  const float2 r = rope_apply(x[i0], x[i1], rope_angle(position, inv_freq[i]));
  x[i0] = r.x;
  x[i1] = r.y;
  return make_int2(i0, i1);
}

// A head held by a warp in registers, lane l holding values l·DPL ..
// l·DPL + DPL − 1 (head_dim = 32·DPL; the paged attention kernel's layout):
// the angles of a lane's pairs, computed once per position and applied to
// every head of that position. Interleaved pairs lie within a lane (DPL
// even); the partner of a split-half pair is 16 lanes away.
template <int DPL>
struct RopeLane {
  float2 cs[DPL];  // value j's pair (interleaved: entry j/2)
  bool interleaved;

  RopeLane() = default;  // (no rotation set: for kernels that take none)
  __device__ __forceinline__ RopeLane(int lane, bool interleaved_pairs, int32_t position, const float* inv_freq)
      : interleaved(interleaved_pairs) {
    static_assert(DPL % 2 == 0, "RopeLane: pairs (2i, 2i+1) must lie within a lane");
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      if (interleaved && j >= DPL / 2) break;
      const int i = interleaved ? (lane * DPL) / 2 + j : (lane * DPL + j) % (16 * DPL);
      cs[j] = rope_angle(position, inv_freq[i]);
    }
  }

  // Rotates x; all 32 lanes must call it.
  __device__ __forceinline__ void apply(float (&x)[DPL], int lane) const {
    if (interleaved) {
#pragma unroll
      for (int j = 0; j < DPL; j += 2) {
        const float2 r = rope_apply(x[j], x[j + 1], cs[j / 2]);
        x[j] = r.x;
        x[j + 1] = r.y;
      }
      return;
    }
    const bool first_half = lane < 16;
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const float partner = __shfl_xor_sync(0xffffffffu, x[j], 16);
      const float2 r = first_half ? rope_apply(x[j], partner, cs[j]) : rope_apply(partner, x[j], cs[j]);
      x[j] = first_half ? r.x : r.y;
    }
  }
};

}  // namespace brioche::cuda::detail
#endif
