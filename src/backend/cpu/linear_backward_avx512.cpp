// matmul_input_grad's register block compiled for AVX-512 (see
// linear_backward.cpp): 32 columns per block instead of AVX2's 16, the same
// sum over the weight rows in the same order (bit-identical results).
#include <algorithm>
#include <cstdint>

#include "backend/cpu/linear_backward_kernels.h"

#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>

// GCC 12 flags the deliberately undefined registers inside its own AVX-512
// intrinsics (`__Y = __Y`) as uninitialized once they are inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace brioche::backend::cpu {
namespace {

// dx[i, c..c+32) += Σ_j dy[i, j] · w[j, c..c+32) for R rows: 2R accumulators
// in registers, each weight vector loaded once for the R rows.
template <int R>
void block32(const float* dy, int64_t ld_dy, const float* w, int64_t ld_w, int64_t m0, int64_t m1, float* dx,
             int64_t ld_dx, int64_t c) {
  __m512 acc[R][2];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t j = m0; j < m1; ++j) {
    const float* wj = w + (j - m0) * ld_w + c;
    const __m512 w0 = _mm512_loadu_ps(wj), w1 = _mm512_loadu_ps(wj + 16);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m512 b = _mm512_set1_ps(dy[i * ld_dy + j]);
      acc[i][0] = _mm512_fmadd_ps(b, w0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(b, w1, acc[i][1]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    float* out = dx + i * ld_dx + c;
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), acc[i][0]));
    _mm512_storeu_ps(out + 16, _mm512_add_ps(_mm512_loadu_ps(out + 16), acc[i][1]));
  }
}

template <int P>
void outer(const OuterBlock& b) {
  constexpr int kV = 3;  // 48 columns
  const int tail = b.q_count - 32;
  const __mmask16 m0 = __mmask16((1u << std::min(b.q_count, 16)) - 1);
  const __mmask16 m1 = b.q_count > 16 ? __mmask16((1u << std::min(b.q_count - 16, 16)) - 1) : 0;
  const __mmask16 m2 = tail > 0 ? __mmask16((1u << tail) - 1) : 0;
  __m512 acc[P][kV];
#pragma GCC unroll 8
  for (int i = 0; i < P; ++i)
    for (int v = 0; v < kV; ++v) acc[i][v] = _mm512_loadu_ps(b.c + i * 48 + v * 16);
  const float* vr = b.v;
  const float* pr = b.p;
  for (int64_t r = 0; r < b.n; ++r, vr += b.ld_v, pr += b.ld_p) {
    const __m512 x0 = _mm512_maskz_loadu_ps(m0, vr), x1 = _mm512_maskz_loadu_ps(m1, vr + 16),
                 x2 = _mm512_maskz_loadu_ps(m2, vr + 32);
#pragma GCC unroll 8
    for (int i = 0; i < P; ++i) {
      const __m512 s = _mm512_set1_ps(pr[i]);
      acc[i][0] = _mm512_fmadd_ps(s, x0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(s, x1, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(s, x2, acc[i][2]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < P; ++i)
    for (int v = 0; v < kV; ++v) _mm512_storeu_ps(b.c + i * 48 + v * 16, acc[i][v]);
}

}  // namespace

void weight_grad_block_avx512(const OuterBlock& b) {
  switch (b.p_count) {
    case 8: return outer<8>(b);
    case 7: return outer<7>(b);
    case 6: return outer<6>(b);
    case 5: return outer<5>(b);
    case 4: return outer<4>(b);
    case 3: return outer<3>(b);
    case 2: return outer<2>(b);
    default: return outer<1>(b);
  }
}

void input_grad_block32_avx512(const InputGradBlock& b) {
  switch (b.rows) {
    case 4: return block32<4>(b.dy, b.ld_dy, b.w, b.ld_w, b.m0, b.m1, b.dx, b.ld_dx, b.c);
    case 3: return block32<3>(b.dy, b.ld_dy, b.w, b.ld_w, b.m0, b.m1, b.dx, b.ld_dx, b.c);
    case 2: return block32<2>(b.dy, b.ld_dy, b.w, b.ld_w, b.m0, b.m1, b.dx, b.ld_dx, b.c);
    default: return block32<1>(b.dy, b.ld_dy, b.w, b.ld_w, b.m0, b.m1, b.dx, b.ld_dx, b.c);
  }
}

}  // namespace brioche::backend::cpu
