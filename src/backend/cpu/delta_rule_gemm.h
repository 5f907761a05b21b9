// The small matrix products of the gated delta rule's chunked form (forward
// and backward, backend/cpu/gated_delta_rule*.cpp): a chunk of ≤ 16 rows
// against a key_dim × value_dim state, register-blocked in AVX2 lanes.
#pragma once

#include <cstdint>

#include "backend/cpu/vec_f32.h"

namespace brioche::backend::cpu {

// y_b[c] += Σ_{k<K} coef_b[k] · x[k·ldx + c] for b < NB, c < n: a block of
// NB output rows against a K × n matrix, each x row loaded once per 16
// columns for all NB outputs (2·NB accumulators in registers).
template <int NB>
void accumulate_block(float* const* y, const float* const* coef, int K, const float* x, int64_t ldx, int n) {
  int c = 0;
#if BRIOCHE_VEC_AVX2
  for (; c + 16 <= n; c += 16) {
    __m256 lo[NB], hi[NB];
    for (int b = 0; b < NB; ++b) lo[b] = hi[b] = _mm256_setzero_ps();
    for (int k = 0; k < K; ++k) {
      const float* xk = x + int64_t(k) * ldx + c;
      const __m256 x0 = _mm256_loadu_ps(xk), x1 = _mm256_loadu_ps(xk + 8);
      for (int b = 0; b < NB; ++b) {
        const __m256 cb = _mm256_broadcast_ss(coef[b] + k);
        lo[b] = _mm256_fmadd_ps(cb, x0, lo[b]);
        hi[b] = _mm256_fmadd_ps(cb, x1, hi[b]);
      }
    }
    for (int b = 0; b < NB; ++b) {
      _mm256_storeu_ps(y[b] + c, _mm256_add_ps(_mm256_loadu_ps(y[b] + c), lo[b]));
      _mm256_storeu_ps(y[b] + c + 8, _mm256_add_ps(_mm256_loadu_ps(y[b] + c + 8), hi[b]));
    }
  }
#endif
  for (; c < n; ++c)
    for (int b = 0; b < NB; ++b) {
      float sum = 0.0f;
      for (int k = 0; k < K; ++k) sum += coef[b][k] * x[int64_t(k) * ldx + c];
      y[b][c] += sum;
    }
}

// accumulate_block over any number of output rows, four at a time:
// Y += C·X with C's rows at coef[b] (K entries each) and X [K, n] (row stride ldx).
inline void accumulate_rows(float* const* y, const float* const* coef, int n_rows, int K, const float* x, int64_t ldx,
                            int n) {
  int b = 0;
  for (; b + 4 <= n_rows; b += 4) accumulate_block<4>(y + b, coef + b, K, x, ldx, n);
  switch (n_rows - b) {
    case 3: accumulate_block<3>(y + b, coef + b, K, x, ldx, n); break;
    case 2: accumulate_block<2>(y + b, coef + b, K, x, ldx, n); break;
    case 1: accumulate_block<1>(y + b, coef + b, K, x, ldx, n); break;
    default: break;
  }
}

// y[i·ldy + j] = Σ_{c<n} a[i·lda + c] · b[j·ldb + c] for i < MA, j < MB: a
// block of dot products, each a and b row loaded once per 8 columns.
template <int MA, int MB>
void dot_block(const float* a, int64_t lda, const float* b, int64_t ldb, int n, float* y, int64_t ldy) {
  int c = 0;
  float sums[MA][MB] = {};
#if BRIOCHE_VEC_AVX2
  __m256 acc[MA][MB];
  for (int i = 0; i < MA; ++i)
    for (int j = 0; j < MB; ++j) acc[i][j] = _mm256_setzero_ps();
  for (; c + 8 <= n; c += 8) {
    __m256 bv[MB];
    for (int j = 0; j < MB; ++j) bv[j] = _mm256_loadu_ps(b + j * ldb + c);
    for (int i = 0; i < MA; ++i) {
      const __m256 av = _mm256_loadu_ps(a + i * lda + c);
      for (int j = 0; j < MB; ++j) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MA; ++i)
    for (int j = 0; j < MB; ++j) sums[i][j] = hsum256(acc[i][j]);
#endif
  for (; c < n; ++c)
    for (int i = 0; i < MA; ++i)
      for (int j = 0; j < MB; ++j) sums[i][j] += a[i * lda + c] * b[j * ldb + c];
  for (int i = 0; i < MA; ++i)
    for (int j = 0; j < MB; ++j) y[i * ldy + j] = sums[i][j];
}

// Y = A·Bᵀ: y[i·ldy + j] = a_i · b_j for i < m_a, j < m_b (rows of n floats;
// written, =), in 4 × 2 blocks.
inline void dot_rows(const float* a, int64_t lda, int m_a, const float* b, int64_t ldb, int m_b, int n, float* y,
                     int64_t ldy) {
  int i = 0;
  for (; i + 4 <= m_a; i += 4) {
    int j = 0;
    for (; j + 2 <= m_b; j += 2) dot_block<4, 2>(a + i * lda, lda, b + j * ldb, ldb, n, y + i * ldy + j, ldy);
    if (j < m_b) dot_block<4, 1>(a + i * lda, lda, b + j * ldb, ldb, n, y + i * ldy + j, ldy);
  }
  for (; i < m_a; ++i) {
    int j = 0;
    for (; j + 4 <= m_b; j += 4) dot_block<1, 4>(a + i * lda, lda, b + j * ldb, ldb, n, y + i * ldy + j, ldy);
    for (; j < m_b; ++j) dot_block<1, 1>(a + i * lda, lda, b + j * ldb, ldb, n, y + i * ldy + j, ldy);
  }
}

}  // namespace brioche::backend::cpu
