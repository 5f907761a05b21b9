// The chunked delta-rule backward with its small products in AVX-512 lanes:
// 16 floats a vector and 32 registers, so a product block holds 4 output rows
// × 32 columns (accumulate) or 4 × 4 dot products; tails are masked loads.
// The backward itself (gated_delta_rule_chunk_backward_impl.h) and the
// standard headers come before the target pragma, so only the kernels below
// are compiled for the wider target.
#include <cstdint>

#include "backend/cpu/gated_delta_rule_chunk_backward_impl.h"

#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>

// GCC 12 flags the deliberately undefined registers inside its own AVX-512
// intrinsics (`__Y = __Y`) as uninitialized once they are inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace brioche::backend::cpu::detail {
namespace {

inline __mmask16 tail_mask(int left) { return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u); }

// y_b[c] += Σ_{k<K} coef_b[k] · x[k·ldx + c] for b < NB: 32 columns at a time, then 16 (masked at the end).
template <int NB>
void accumulate_block(float* const* y, const float* const* coef, int K, const float* x, int64_t ldx, int n) {
  int c = 0;
  for (; c + 32 <= n; c += 32) {
    __m512 lo[NB], hi[NB];
    for (int b = 0; b < NB; ++b) lo[b] = hi[b] = _mm512_setzero_ps();
    for (int k = 0; k < K; ++k) {
      const float* xk = x + int64_t(k) * ldx + c;
      const __m512 x0 = _mm512_loadu_ps(xk), x1 = _mm512_loadu_ps(xk + 16);
      for (int b = 0; b < NB; ++b) {
        const __m512 cb = _mm512_set1_ps(coef[b][k]);
        lo[b] = _mm512_fmadd_ps(cb, x0, lo[b]);
        hi[b] = _mm512_fmadd_ps(cb, x1, hi[b]);
      }
    }
    for (int b = 0; b < NB; ++b) {
      _mm512_storeu_ps(y[b] + c, _mm512_add_ps(_mm512_loadu_ps(y[b] + c), lo[b]));
      _mm512_storeu_ps(y[b] + c + 16, _mm512_add_ps(_mm512_loadu_ps(y[b] + c + 16), hi[b]));
    }
  }
  for (; c < n; c += 16) {
    const __mmask16 m = tail_mask(n - c);
    __m512 acc[NB];
    for (int b = 0; b < NB; ++b) acc[b] = _mm512_setzero_ps();
    for (int k = 0; k < K; ++k) {
      const __m512 xk = _mm512_maskz_loadu_ps(m, x + int64_t(k) * ldx + c);
      for (int b = 0; b < NB; ++b) acc[b] = _mm512_fmadd_ps(_mm512_set1_ps(coef[b][k]), xk, acc[b]);
    }
    for (int b = 0; b < NB; ++b)
      _mm512_mask_storeu_ps(y[b] + c, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y[b] + c), acc[b]));
  }
}

// y[i·ldy + j] = a_i · b_j for i < MA, j < MB, 16 columns a step (the last masked).
template <int MA, int MB>
void dot_block(const float* a, int64_t lda, const float* b, int64_t ldb, int n, float* y, int64_t ldy) {
  __m512 acc[MA][MB];
  for (int i = 0; i < MA; ++i)
    for (int j = 0; j < MB; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int c = 0; c < n; c += 16) {
    const __mmask16 m = tail_mask(n - c);
    __m512 bv[MB];
    for (int j = 0; j < MB; ++j) bv[j] = _mm512_maskz_loadu_ps(m, b + j * ldb + c);
    for (int i = 0; i < MA; ++i) {
      const __m512 av = _mm512_maskz_loadu_ps(m, a + i * lda + c);
      for (int j = 0; j < MB; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MA; ++i)
    for (int j = 0; j < MB; ++j) y[i * ldy + j] = _mm512_reduce_add_ps(acc[i][j]);
}

struct Avx512Gemm {
  static void accumulate_rows(float* const* y, const float* const* coef, int n_rows, int K, const float* x, int64_t ldx,
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
  static void dot_rows(const float* a, int64_t lda, int m_a, const float* b, int64_t ldb, int m_b, int n, float* y,
                       int64_t ldy) {
    int i = 0;
    for (; i + 4 <= m_a; i += 4) {
      int j = 0;
      for (; j + 4 <= m_b; j += 4) dot_block<4, 4>(a + i * lda, lda, b + j * ldb, ldb, n, y + i * ldy + j, ldy);
      for (; j < m_b; ++j) dot_block<4, 1>(a + i * lda, lda, b + j * ldb, ldb, n, y + i * ldy + j, ldy);
    }
    for (; i < m_a; ++i) {
      int j = 0;
      for (; j + 4 <= m_b; j += 4) dot_block<1, 4>(a + i * lda, lda, b + j * ldb, ldb, n, y + i * ldy + j, ldy);
      for (; j < m_b; ++j) dot_block<1, 1>(a + i * lda, lda, b + j * ldb, ldb, n, y + i * ldy + j, ldy);
    }
  }
};

}  // namespace

void chunked_head_backward_avx512(const GatedDeltaRuleBackwardArgs& args, const NormedKeys& normed, int h,
                                  const ops::RecurrentSequence& seq, float* dqh, float* dkh) {
  ChunkedBackward<Avx512Gemm>(args, normed, h, dqh, dkh).run(seq);
}

}  // namespace brioche::backend::cpu::detail
