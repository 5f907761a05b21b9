// The LoRA dropout mask as a pure function of (key, row, column), shared by
// the CPU and CUDA kernels (host/device inline) so both draw the same mask
// and every recompute replays it without storing it.
//
//   key    = mix(step_seed ^ mix(16·layer + module + 1))
//   u      = top 24 bits of mix(key ^ mix(row·0x100000001B3 + col)) / 2^24   ∈ [0, 1)
//   factor = 0 when u < p, else 1/(1 − p)            (inverted dropout)
// Integer hashing and one IEEE division: bit-identical on both devices.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace brioche {

// SplitMix64 finaliser: a well-mixed 64-bit hash.
BRIOCHE_HOST_DEVICE inline uint64_t dropout_mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The stream key of one (step, layer, module): `module` is the projection's
// index (train::Module: q, k, v, o, gate, up, down = 0..6).
BRIOCHE_HOST_DEVICE inline uint64_t dropout_key(uint64_t step_seed, int layer, int module) {
  return dropout_mix64(step_seed ^ dropout_mix64(uint64_t(layer) * 16 + uint64_t(module) + 1));
}

// Multiplier of element (row, col): 0 (dropped) or 1/(1 − p).
BRIOCHE_HOST_DEVICE inline float dropout_factor(uint64_t key, float p, int64_t row, int64_t col) {
  const uint64_t h = dropout_mix64(key ^ dropout_mix64(uint64_t(row) * 0x100000001B3ull + uint64_t(col)));
  const float u = float(h >> 40) * (1.0f / float(1 << 24));  // uniform [0, 1)
  return u < p ? 0.0f : 1.0f / (1.0f - p);
}

}  // namespace brioche
