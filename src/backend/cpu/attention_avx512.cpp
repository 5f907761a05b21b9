// Attention's inner loops compiled for AVX-512 (see attention_kernels.h).
// Standard headers come first so none of their inline functions are
// compiled for the wider target below.
#include <cstdint>

#include "backend/cpu/attention_kernels.h"

#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>

// GCC 12 flags the deliberately undefined registers inside its own AVX-512
// intrinsics (`__Y = __Y`) as uninitialized once they are inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace brioche::backend::cpu {
namespace {

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Sixteen horizontal sums in one vector: out[t] = Σ lanes of r[t]. Each level
// adds pairs after a shuffle, halving the vectors (45 instructions for 16
// sums, against 16 separate reductions of ~8 each).
inline __m512 reduce16x16(const __m512 r[16]) {
  __m512 a[8], b[4], c[2];
  // a[k], per 128-bit lane: [r2k(0+2), r2k+1(0+2), r2k(1+3), r2k+1(1+3)]
  for (int k = 0; k < 8; ++k)
    a[k] = _mm512_add_ps(_mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]), _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]));
  // b[k], per 128-bit lane: that lane's partial sums of keys 4k..4k+3
  for (int k = 0; k < 4; ++k) {
    const __m512d x = _mm512_castps_pd(a[2 * k]), y = _mm512_castps_pd(a[2 * k + 1]);
    b[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  // c[k]: lanes [b2k(l0+l1), b2k(l2+l3), b2k+1(l0+l1), b2k+1(l2+l3)]
  for (int k = 0; k < 2; ++k)
    c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  // lane k holds keys 4k..4k+3 in order
  return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

template <typename T>
void score_keys(const float* q, const T* k, int64_t slot_stride, int d, int64_t n, float scale, float* scores) {
  const __m512 vscale = _mm512_set1_ps(scale);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 acc[16];
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i < d; i += 16) {
      const __m512 qv = _mm512_loadu_ps(q + i);
#pragma GCC unroll 16
      for (int t = 0; t < 16; ++t) acc[t] = _mm512_fmadd_ps(qv, load16(k + (j + t) * slot_stride + i), acc[t]);
    }
    _mm512_storeu_ps(scores + j, _mm512_mul_ps(reduce16x16(acc), vscale));
  }
  for (; j < n; ++j) {
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < d; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16(k + j * slot_stride + i), acc);
    scores[j] = _mm512_reduce_add_ps(acc) * scale;
  }
}

// acc[i .. i+16W) += Σ_j probs[j]·v_j[i .. i+16W): even and odd keys go to
// separate accumulators, so 2W independent FMA chains hide the FMA latency.
template <int W, typename T>
void accumulate_slice(const float* probs, const T* v, int64_t slot_stride, int64_t n, float* acc) {
  __m512 even[W], odd[W];
#pragma GCC unroll 4
  for (int s = 0; s < W; ++s) {
    even[s] = _mm512_loadu_ps(acc + 16 * s);
    odd[s] = _mm512_setzero_ps();
  }
  int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    const __m512 p0 = _mm512_set1_ps(probs[j]), p1 = _mm512_set1_ps(probs[j + 1]);
    const T* v0 = v + j * slot_stride;
    const T* v1 = v0 + slot_stride;
#pragma GCC unroll 4
    for (int s = 0; s < W; ++s) {
      even[s] = _mm512_fmadd_ps(p0, load16(v0 + 16 * s), even[s]);
      odd[s] = _mm512_fmadd_ps(p1, load16(v1 + 16 * s), odd[s]);
    }
  }
  if (j < n) {
    const __m512 p = _mm512_set1_ps(probs[j]);
#pragma GCC unroll 4
    for (int s = 0; s < W; ++s) even[s] = _mm512_fmadd_ps(p, load16(v + j * slot_stride + 16 * s), even[s]);
  }
#pragma GCC unroll 4
  for (int s = 0; s < W; ++s) _mm512_storeu_ps(acc + 16 * s, _mm512_add_ps(even[s], odd[s]));
}

template <typename T>
void accumulate_values(const float* probs, const T* v, int64_t slot_stride, int d, int64_t n, float* acc) {
  int i = 0;
  for (; i + 64 <= d; i += 64) accumulate_slice<4>(probs, v + i, slot_stride, n, acc + i);
  for (; i < d; i += 16) accumulate_slice<1>(probs, v + i, slot_stride, n, acc + i);
}

}  // namespace

const AttentionKernels<float>& attention_kernels_avx512_f32() {
  static const AttentionKernels<float> kernels{score_keys<float>, accumulate_values<float>};
  return kernels;
}

const AttentionKernels<uint16_t>& attention_kernels_avx512_f16() {
  static const AttentionKernels<uint16_t> kernels{score_keys<uint16_t>, accumulate_values<uint16_t>};
  return kernels;
}

}  // namespace brioche::backend::cpu
