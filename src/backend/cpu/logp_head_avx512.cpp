// The fused log-prob head's per-row steps with AVX-512 (logp_head.cpp
// dispatches): e^x of 16 logits at a time (exp_avx512.h, a few ulp) where the
// scalar loops called the library's expf once a logit, twice a step over
// every row's whole vocabulary (BENCHMARKS.md, training: the CPU ORPO step).
#include <algorithm>
#include <limits>

#include "backend/cpu/logp_head_kernels.h"

#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>

#include "backend/cpu/exp_avx512.h"

// GCC 12 flags the deliberately undefined registers inside its own AVX-512
// intrinsics (`__Y = __Y`) as uninitialized once they are inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace brioche::backend::cpu {

namespace {

__mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xffff) : n > 0 ? __mmask16((1u << n) - 1) : __mmask16(0); }

}  // namespace

LogpRowSums logp_row_sums_avx512(const float* z, int64_t width, float run_max) {
  __m512 vm = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t v = 0; v < width; v += 16) vm = _mm512_mask_max_ps(vm, lanes(width - v), vm, _mm512_loadu_ps(z + v));
  const float m_new = std::max(run_max, _mm512_reduce_max_ps(vm));
  const __m512 shift = _mm512_set1_ps(m_new);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t v = 0; v < width; v += 16) {
    const __mmask16 m = lanes(width - v);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, z + v), shift))));
  }
  return {.max = m_new, .sum = _mm512_reduce_add_ps(sum)};
}

void logp_row_grad_avx512(float* z, int64_t width, float d_logp, float lse) {
  const __m512 l = _mm512_set1_ps(lse), ng = _mm512_set1_ps(-d_logp);
  for (int64_t v = 0; v < width; v += 16) {
    const __mmask16 m = lanes(width - v);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, z + v), l));
    _mm512_mask_storeu_ps(z + v, m, _mm512_mul_ps(ng, e));
  }
}

}  // namespace brioche::backend::cpu
