// Fuzz build only: tests/fuzz/CMakeLists.txt force-includes this into
// src/backend/cpu/cpu_features.cpp. clang 14's __builtin_cpu_supports does
// not know "f16c" (GCC's does) and refuses to compile the call; this routes
// the file's calls through a function that reads F16C from CPUID itself and
// hands the other features to the builtin.
#pragma once

#include <cpuid.h>

#include <string_view>

inline bool brioche_fuzz_cpu_supports(std::string_view feature) {
  if (feature == "f16c") {
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  }
  if (feature == "avx2") return __builtin_cpu_supports("avx2");
  if (feature == "fma") return __builtin_cpu_supports("fma");
  if (feature == "avx512f") return __builtin_cpu_supports("avx512f");
  if (feature == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (feature == "avx512dq") return __builtin_cpu_supports("avx512dq");
  if (feature == "avx512vl") return __builtin_cpu_supports("avx512vl");
  if (feature == "avx512vnni") return __builtin_cpu_supports("avx512vnni");
  return false;
}

#define __builtin_cpu_supports(feature) brioche_fuzz_cpu_supports(feature)
