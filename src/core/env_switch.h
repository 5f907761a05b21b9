// Switches read from the environment: for A/B runs of features that are on
// by default (BRIOCHE_CUDA_GRAPHS, BRIOCHE_CUDA_PDL, ...), and checks that
// are off by default (BRIOCHE_POISON).
#pragma once

#include <cstdlib>
#include <cstring>

namespace brioche {

// False only when the variable `name` is set to "0".
inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// True only when the variable `name` is set to "1".
inline bool env_flag_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// The integer in the variable `name`, or `fallback` when it is unset.
inline long env_int(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::strtol(v, nullptr, 10) : fallback;
}

}  // namespace brioche
