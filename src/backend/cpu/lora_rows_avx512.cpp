// The LoRA row kernels (lora_rows_kernels.h) compiled for AVX-512: 16 lanes
// per vector and 32 registers, so a shrink pass takes all 8 factor rows of
// a rank-8 adapter for 2 rows at once (16 accumulators), and an expand pass
// 64 columns. Tails are masked loads, not scalar loops (Q8_0 factors come
// in whole blocks of 32 and have none). Standard headers
// come first so none of their inline functions are compiled for the wider
// target below.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/lora_rows_kernels.h"

#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>

// GCC 12 flags the deliberately undefined registers inside its own AVX-512
// intrinsics (`__Y = __Y`) as uninitialized once they are inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace brioche::backend::cpu {
namespace {

inline __m512 load_f16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 load_f16(const uint16_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }

// u[i][k0 + j] = A[k0 + j]·x[i] for R rows and K factor rows, R·K
// independent accumulators; the last in % 16 elements through masked loads
// (zeros add nothing). The loops over i and j are unrolled by pragma (GCC
// keeps rolled loops' accumulators on the stack at -O2).
template <int R, int K>
void shrink_rows_k(const float* const* x, float* const* u, const uint16_t* a, int64_t in, int32_t k0) {
  __m512 acc[R][K];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) acc[i][j] = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int j = 0; j < K; ++j) prefetch_factor_row_start(a + int64_t(k0 + j) * in, 2 * in);
  int64_t c = 0;
  for (; c + 16 <= in; c += 16) {
    if (c % 32 == 0) {  // one prefetch per cache line of each factor row
#pragma GCC unroll 16
      for (int j = 0; j < K; ++j) prefetch_factor_line(a + int64_t(k0 + j) * in + c + kLoraPrefetchAhead);
    }
    __m512 xv[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) xv[i] = _mm512_loadu_ps(x[i] + c);
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) {
      const __m512 w = load_f16(a + int64_t(k0 + j) * in + c);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(w, xv[i], acc[i][j]);
    }
  }
  if (c < in) {
    const __mmask16 m = __mmask16((1u << (in - c)) - 1);
    __m512 xv[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) xv[i] = _mm512_maskz_loadu_ps(m, x[i] + c);
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) {
      const __m512 w = load_f16(a + int64_t(k0 + j) * in + c, m);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(w, xv[i], acc[i][j]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) u[i][k0 + j] = _mm512_reduce_add_ps(acc[i][j]);
}

// Factor rows as many at a time as 32 registers allow (R·K ≤ 16
// accumulators beside R x vectors and one factor vector).
template <int R>
void shrink_rows(const float* const* x, float* const* u, const uint16_t* a, int64_t in, int32_t rank) {
  constexpr int K = R <= 2 ? 8 : R == 3 ? 5 : 4;
  int32_t k = 0;
  for (; k + K <= rank; k += K) shrink_rows_k<R, K>(x, u, a, in, k);
  for (; k + 2 <= rank; k += 2) shrink_rows_k<R, 2>(x, u, a, in, k);
  for (; k < rank; ++k) shrink_rows_k<R, 1>(x, u, a, in, k);
}

// y[i][c] += Σ_k u[i][k]·bt[k·ld + c]: V column vectors of 16 per pass,
// each y vector loaded and stored once, the rank's products in registers.
template <int R, int V>
void expand_pass(float* const* y, const float* const* u, const uint16_t* bt, int64_t ld, int32_t rank, int64_t c,
                 __mmask16 last_mask) {
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) acc[i][v] = _mm512_maskz_loadu_ps(v + 1 < V ? 0xffff : last_mask, y[i] + c + 16 * v);
  for (int32_t k = 0; k < rank; ++k) {
    const uint16_t* row = bt + int64_t(k) * ld + c;
#pragma GCC unroll 16
    for (int v = 0; v < V; v += 2) prefetch_factor_line(row + kLoraPrefetchAhead + 16 * v);
    __m512 b[V];
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) b[v] = load_f16(row + 16 * v, v + 1 < V ? 0xffff : last_mask);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512 uk = _mm512_set1_ps(u[i][k]);
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(uk, b[v], acc[i][v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(y[i] + c + 16 * v, v + 1 < V ? 0xffff : last_mask, acc[i][v]);
}

template <int R>
void expand_rows(float* const* y, const float* const* u, const uint16_t* bt, int64_t ld, int32_t rank, int64_t width) {
  constexpr int V = R <= 2 ? 4 : 2;
  for (int32_t k = 0; k < rank; ++k) prefetch_factor_row_start(bt + int64_t(k) * ld, 2 * width);
  int64_t c = 0;
  for (; c + 16 * V <= width; c += 16 * V) expand_pass<R, V>(y, u, bt, ld, rank, c, 0xffff);
  for (; c + 16 <= width; c += 16) expand_pass<R, 1>(y, u, bt, ld, rank, c, 0xffff);
  if (c < width) expand_pass<R, 1>(y, u, bt, ld, rank, c, __mmask16((1u << (width - c)) - 1));
}

// One Q8_0 block's 32 values, d·q, as two vectors.
inline void load_q8_block(const uint8_t* block, __m512& lo, __m512& hi) {
  uint16_t d16;
  std::memcpy(&d16, block, 2);
  const __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16(int16_t(d16)));
  const auto q = [&](int half) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + 16 * half));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)));
  };
  lo = q(0);
  hi = q(1);
}

// shrink_rows_k on Q8_0 factors by block column: per step the K factor
// rows' block b, adjacent in memory, each decoded once for the R rows.
template <int R, int K>
void shrink_q8_rows_k(const float* const* x, float* const* u, const uint8_t* a, int64_t in, int32_t rank, int32_t k0) {
  const int64_t column_bytes = int64_t(rank) * kQ8BlockBytes;
  __m512 acc[R][K];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) acc[i][j] = _mm512_setzero_ps();
  prefetch_stream_start(a + int64_t(k0) * kQ8BlockBytes, in / kQ8Block * column_bytes, kLoraQ8PrefetchBytes);
  for (int64_t c = 0; c < in; c += kQ8Block) {
    const uint8_t* blocks = a + c / kQ8Block * column_bytes + int64_t(k0) * kQ8BlockBytes;
    __m512 x_lo[R], x_hi[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      x_lo[i] = _mm512_loadu_ps(x[i] + c);
      x_hi[i] = _mm512_loadu_ps(x[i] + c + 16);
    }
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) {
      prefetch_factor_line(blocks + j * kQ8BlockBytes + kLoraQ8PrefetchBytes);
      __m512 w_lo, w_hi;
      load_q8_block(blocks + j * kQ8BlockBytes, w_lo, w_hi);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        acc[i][j] = _mm512_fmadd_ps(w_lo, x_lo[i], acc[i][j]);
        acc[i][j] = _mm512_fmadd_ps(w_hi, x_hi[i], acc[i][j]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) u[i][k0 + j] = _mm512_reduce_add_ps(acc[i][j]);
}

template <int R>
void shrink_q8_rows(const float* const* x, float* const* u, const uint8_t* a, int64_t in, int32_t rank) {
  constexpr int K = R <= 2 ? 8 : R == 3 ? 5 : 4;
  int32_t k = 0;
  for (; k + K <= rank; k += K) shrink_q8_rows_k<R, K>(x, u, a, in, rank, k);
  for (; k + 2 <= rank; k += 2) shrink_q8_rows_k<R, 2>(x, u, a, in, rank, k);
  for (; k < rank; ++k) shrink_q8_rows_k<R, 1>(x, u, a, in, rank, k);
}

// expand_pass on Q8_0 factors by block column: NB block columns (32·NB
// output columns) from column c, every factor row's blocks of them.
template <int R, int NB>
void expand_q8_pass(float* const* y, const float* const* u, const uint8_t* bt, int32_t rank, int64_t c) {
  constexpr int V = 2 * NB;
  const int64_t column_bytes = int64_t(rank) * kQ8BlockBytes;
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) acc[i][v] = _mm512_loadu_ps(y[i] + c + 16 * v);
  const uint8_t* columns = bt + c / kQ8Block * column_bytes;
  for (int32_t k = 0; k < rank; ++k) {
    __m512 w[V];
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) {
      const uint8_t* block = columns + b * column_bytes + int64_t(k) * kQ8BlockBytes;
      prefetch_factor_line(block + kLoraQ8PrefetchBytes);
      load_q8_block(block, w[2 * b], w[2 * b + 1]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512 uk = _mm512_set1_ps(u[i][k]);
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(uk, w[v], acc[i][v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(y[i] + c + 16 * v, acc[i][v]);
}

template <int R>
void expand_q8_rows(float* const* y, const float* const* u, const uint8_t* bt, int32_t rank, int64_t width) {
  constexpr int NB = R <= 2 ? 2 : 1;
  prefetch_stream_start(bt, width / kQ8Block * rank * kQ8BlockBytes, kLoraQ8PrefetchBytes);
  int64_t c = 0;
  for (; c + kQ8Block * NB <= width; c += kQ8Block * NB) expand_q8_pass<R, NB>(y, u, bt, rank, c);
  for (; c < width; c += kQ8Block) expand_q8_pass<R, 1>(y, u, bt, rank, c);
}

}  // namespace

const LoraRowKernels& lora_row_kernels_avx512() {
  static const LoraRowKernels kernels{
      .shrink = {&shrink_rows<1>, &shrink_rows<2>, &shrink_rows<3>, &shrink_rows<4>},
      .expand = {&expand_rows<1>, &expand_rows<2>, &expand_rows<3>, &expand_rows<4>},
      .shrink_q8 = {&shrink_q8_rows<1>, &shrink_q8_rows<2>, &shrink_q8_rows<3>, &shrink_q8_rows<4>},
      .expand_q8 = {&expand_q8_rows<1>, &expand_q8_rows<2>, &expand_q8_rows<3>, &expand_q8_rows<4>},
  };
  return kernels;
}

}  // namespace brioche::backend::cpu
