#include "engine/rng.h"

#include <random>

namespace brioche::engine {

namespace {

// splitmix64 (Steele, Lea, Flood 2014): spreads any 64-bit seed, including 0,
// over a state that xoshiro accepts (never all zero).
uint64_t splitmix64(uint64_t& x) {
  x += 0x9E3779B97F4A7C15ull;
  uint64_t z = x;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

SamplerRng::SamplerRng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& word : state_) word = splitmix64(x);
}

uint64_t SamplerRng::random_seed() {
  std::random_device device;
  return (uint64_t(device()) << 32) ^ uint64_t(device());
}

uint64_t SamplerRng::next_u64() {
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double SamplerRng::next_unit() { return double(next_u64() >> 11) * 0x1.0p-53; }

}  // namespace brioche::engine
