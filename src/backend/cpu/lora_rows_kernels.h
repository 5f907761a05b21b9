// The inner kernels of the unmerged LoRA row update (lora_rows.cpp), per
// instruction set (internal to backend/cpu). lora_rows.cpp holds the AVX2
// ones and picks the set from cpu::active_isa(); lora_rows_avx512.cpp
// compiles the 512-bit ones.
//
// Every factor row is f16 or Q8_0, read as a stream that the kernels
// prefetch kLoraPrefetchBytes ahead: a decode step reads every factor of the
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

// How far ahead of its loads a factor row is prefetched: 8 cache lines (256
// f16 elements).
inline constexpr int64_t kLoraPrefetchBytes = 512;
inline constexpr int64_t kLoraPrefetchAhead = kLoraPrefetchBytes / 2;  // in f16 elements

inline void prefetch_factor_line(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

// The first `ahead` bytes of a factor stream of `bytes`, before its first load.
inline void prefetch_stream_start(const void* p, int64_t bytes, int64_t ahead) {
  for (int64_t o = 0; o < bytes && o < ahead; o += 64) prefetch_factor_line(static_cast<const char*>(p) + o);
}
// The first kLoraPrefetchBytes of an f16 factor row of `bytes`.
inline void prefetch_factor_row_start(const void* row, int64_t bytes) {
  prefetch_stream_start(row, bytes, kLoraPrefetchBytes);
}

// Q8_0 factors (core/dtype.h): blocks of 32 values, each an f16 scale d and
// 32 int8 q, value = d·q; 34 bytes per 32 values.
inline constexpr int64_t kQ8Block = 32, kQ8BlockBytes = 34;
// A Q8_0 factor is one stream in block-column order: the kernels prefetch
// it further ahead than an f16 row.
inline constexpr int64_t kLoraQ8PrefetchBytes = 1024;

struct LoraRowKernels {
  // u[i][k] = A[k]·x[i] for R = index + 1 rows: A f16 [rank, in] row-major.
  void (*shrink[kLoraRowGroup])(const float* const* x, float* const* u, const uint16_t* a, int64_t in, int32_t rank);
  // y[i][c] += Σ_k u[i][k]·bt[k·ld + c] for c < width and R = index + 1
  // rows: one FMA per k, in k order, onto y.
  void (*expand[kLoraRowGroup])(float* const* y, const float* const* u, const uint16_t* bt, int64_t ld, int32_t rank,
                                int64_t width);
  // The same with Q8_0 factors by block column (ops::lora_factor_q8_0):
  // block b of factor row k at (b·rank + k)·34 bytes, in and width
  // multiples of 32; bt points at the first block column of the columns
  // written. Each u and y sums its products in an order that does not
  // depend on R either.
  void (*shrink_q8[kLoraRowGroup])(const float* const* x, float* const* u, const uint8_t* a, int64_t in, int32_t rank);
  void (*expand_q8[kLoraRowGroup])(float* const* y, const float* const* u, const uint8_t* bt, int32_t rank,
                                   int64_t width);
};

const LoraRowKernels& lora_row_kernels_avx2();
const LoraRowKernels& lora_row_kernels_avx512();

}  // namespace brioche::backend::cpu
