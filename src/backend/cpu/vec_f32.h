// Small f32 vector kernels shared by the CPU ops (AVX2+FMA with a scalar tail).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define BRIOCHE_VEC_AVX2 1
#endif

namespace brioche::backend::cpu {

#if BRIOCHE_VEC_AVX2
inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// e^x for 8 floats. x = n·ln2 + r with n = round(x·log2 e), |r| <= ln2/2;
// e^r by its Taylor series to r^7 (truncation < 6e-9 relative), 2^n built in
// the exponent bits. Relative error ~2e-7 (a few ulp) for x in [-87, 88];
// x is clamped there, so e^x below is ~1e-38 (not 0) and above is ~1.6e38
// (not inf): enough for silu and softmax, which divide or normalize.
inline __m256 exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n·ln2 with ln2 split in two so n·ln2_hi is exact
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}
#endif

// Σ a[i]·b[i]
inline float dot_f32(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.0f;
#if BRIOCHE_VEC_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  sum = hsum256(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Σ a[i]·f16(b[i])
inline float dot_f32_f16(const float* a, const uint16_t* b, int64_t n);

// y[i] = e^(x[i] − shift) (exp256's accuracy; x = −inf gives ~1e-38 on the
// vector path, not 0: callers skip masked entries themselves). y may be x.
inline void exp_shifted_f32(const float* x, float shift, float* y, int64_t n) {
  int64_t i = 0;
#if BRIOCHE_VEC_AVX2
  const __m256 vs = _mm256_set1_ps(shift);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs)));
#endif
  for (; i < n; ++i) y[i] = std::exp(x[i] - shift);
}

// y[i] = y[i]·s
inline void scale_f32(float* y, float s, int64_t n) {
  int64_t i = 0;
#if BRIOCHE_VEC_AVX2
  __m256 vs = _mm256_set1_ps(s);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vs));
#endif
  for (; i < n; ++i) y[i] *= s;
}

// y[i] += a·x[i]
inline void axpy_f32(float* y, float a, const float* x, int64_t n) {
  int64_t i = 0;
#if BRIOCHE_VEC_AVX2
  __m256 va = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] += a * x[i];
}

}  // namespace brioche::backend::cpu

#include "core/half.h"

namespace brioche::backend::cpu {

inline float dot_f32_f16(const float* a, const uint16_t* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.0f;
#if BRIOCHE_VEC_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    __m256 vb = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), vb, acc);
  }
  sum = hsum256(acc);
#endif
  for (; i < n; ++i) sum += a[i] * f16_to_f32(b[i]);
  return sum;
}

// y[i] += a·f16(x[i])
inline void axpy_f32_f16(float* y, float a, const uint16_t* x, int64_t n) {
  int64_t i = 0;
#if BRIOCHE_VEC_AVX2
  __m256 va = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8) {
    __m256 vx = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, vx, _mm256_loadu_ps(y + i)));
  }
#endif
  for (; i < n; ++i) y[i] += a * f16_to_f32(x[i]);
}

// Flush-to-zero and denormals-are-zero for the scope of one task (restored
// after): the delta-rule kernels' tasks. Strong decays (g of −20 a row is common) drive e^γ, the state and
// their products through the denormal range, where every multiply costs
// ~100 cycles: measured 277 ms instead of 31 for 512 rows of 8 heads with
// g in [−20, −1]. Values below 1.2e-38 become 0, far below what f32 logits
// can show.
class FlushDenormals {
 public:
#if defined(__SSE__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }  // FTZ (bit 15) | DAZ (bit 6)
  ~FlushDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

}  // namespace brioche::backend::cpu
