// Seeded random numbers for sampling: a fixed, documented algorithm so that
// the same seed gives the same tokens on any machine and any standard library
// (std::mt19937 is portable too, but std::uniform_real_distribution is not).
//
// Algorithm: xoshiro256** (Blackman & Vigna, 2018) whose 256-bit state is
// filled from the 64-bit seed by four outputs of splitmix64. A uniform double
// in [0, 1) takes the top 53 bits of one 64-bit output: (x >> 11) * 2^-53.
#pragma once

#include <cstdint>

namespace brioche::engine {

class SamplerRng {
 public:
  explicit SamplerRng(uint64_t seed);

  // A seed from std::random_device, for requests without a seed.
  static uint64_t random_seed();

  uint64_t next_u64();
  // Uniform in [0, 1), exactly representable multiples of 2^-53.
  double next_unit();

 private:
  uint64_t state_[4];
};

}  // namespace brioche::engine
