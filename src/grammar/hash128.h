// A 128-bit content key built from a stream of 64-bit words: rule structure
// and forward hashes (automaton_equivalence.cpp), and the structural keys of
// stack configurations in the mask compiler (first-byte twins).
#pragma once

#include <cstdint>

namespace brioche::grammar {

// Two independent 64-bit streams: together a 128-bit content key.
struct Hasher128 {
  uint64_t a = 0x6a09e667f3bcc908ull, b = 0xbb67ae8584caa73bull;
  void add(uint64_t v) {
    a = (a ^ v) * 0x100000001b3ull;
    a ^= a >> 31;
    b += v * 0x9e3779b97f4a7c15ull;
    b = (b ^ (b >> 29)) * 0xbf58476d1ce4e5b9ull;
  }
};

}  // namespace brioche::grammar
