// The inner kernels of the unmerged LoRA row update (lora_rows.cpp), per
// instruction set (internal to backend/cpu). lora_rows.cpp holds the AVX2
// ones and picks the set from cpu::active_isa(); lora_rows_avx512.cpp
// compiles the 512-bit ones.
//
// Every factor row is f16, read as a stream that the kernels prefetch
// kLoraPrefetchAhead elements ahead: a decode step reads every factor of the
// batch once, in up to `rank` short streams per call that the hardware
// prefetcher does not ramp up on, so without it the kernels wait on memory
// (BENCHMARKS.md, lora-serving: "Prefetching the factor rows on the CPU").
#pragma once

#include <cstdint>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace brioche::backend::cpu {

// Rows handled together by one kernel call: 1..kLoraRowGroup (each loaded
// factor vector feeds that many rows' multiply-adds).
inline constexpr int kLoraRowGroup = 4;

// How far ahead of its loads a factor row is prefetched, in f16 elements (8
// cache lines).
inline constexpr int64_t kLoraPrefetchAhead = 256;

inline void prefetch_factor_line(const uint16_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }

// The first kLoraPrefetchAhead elements of a factor row, before its first load.
inline void prefetch_factor_row_start(const uint16_t* row, int64_t length) {
  for (int64_t c = 0; c < length && c < kLoraPrefetchAhead; c += 32) prefetch_factor_line(row + c);
}

struct LoraRowKernels {
  // u[i][k] = A[k]·x[i] for R = index + 1 rows: A f16 [rank, in] row-major.
  void (*shrink[kLoraRowGroup])(const float* const* x, float* const* u, const uint16_t* a, int64_t in, int32_t rank);
  // y[i][c] += Σ_k u[i][k]·bt[k·ld + c] for c < width and R = index + 1
  // rows: one FMA per k, in k order, onto y.
  void (*expand[kLoraRowGroup])(float* const* y, const float* const* u, const uint16_t* bt, int64_t ld, int32_t rank,
                                int64_t width);
};

const LoraRowKernels& lora_row_kernels_avx2();
const LoraRowKernels& lora_row_kernels_avx512();

}  // namespace brioche::backend::cpu
