// panel_gemm (panel_gemm.h) compiled for AVX-512.
#include <algorithm>

#include "backend/cpu/panel_gemm.h"

#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>

// GCC 12 flags the deliberately undefined registers inside its own AVX-512
// intrinsics (`__Y = __Y`) as uninitialized once they are inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace brioche::backend::cpu {

namespace {

__mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xffff) : n > 0 ? __mmask16((1u << n) - 1) : __mmask16(0); }

// R rows × V vectors of 16 columns (w ≤ 16·V columns, the last ones masked).
template <int R, int V>
void panel(const PanelGemm& g, const float* a, const float* b, float* out, int64_t w) {
  __mmask16 m[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) m[v] = lanes(w - 16 * v);
  __m512 c[R][V];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      c[r][v] = g.accumulate ? _mm512_maskz_loadu_ps(m[v], out + r * g.ldo + 16 * v) : _mm512_setzero_ps();
  for (int64_t t = 0; t < g.T; ++t) {
    const float* bt = b + t * g.ldb;
    __m512 bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bv[v] = _mm512_maskz_loadu_ps(m[v], bt + 16 * v);
    const float* at = a + t * g.st;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 s = _mm512_set1_ps(at[r * g.sr]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) c[r][v] = _mm512_fmadd_ps(s, bv[v], c[r][v]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(out + r * g.ldo + 16 * v, m[v], c[r][v]);
}

// Rows in panels of R (the last one shorter) for one column block.
template <int R, int V>
void rows_of_panels(const PanelGemm& g, int64_t c0, int64_t w) {
  for (int64_t r0 = 0; r0 < g.rows; r0 += R) {
    const float* a = g.a + r0 * g.sr;
    const float* b = g.b + c0;
    float* out = g.out + r0 * g.ldo + c0;
    switch (std::min<int64_t>(R, g.rows - r0)) {
      case 12: panel<(R >= 12 ? 12 : 1), V>(g, a, b, out, w); break;
      case 11: panel<(R >= 11 ? 11 : 1), V>(g, a, b, out, w); break;
      case 10: panel<(R >= 10 ? 10 : 1), V>(g, a, b, out, w); break;
      case 9: panel<(R >= 9 ? 9 : 1), V>(g, a, b, out, w); break;
      case 8: panel<(R >= 8 ? 8 : 1), V>(g, a, b, out, w); break;
      case 7: panel<(R >= 7 ? 7 : 1), V>(g, a, b, out, w); break;
      case 6: panel<6, V>(g, a, b, out, w); break;
      case 5: panel<5, V>(g, a, b, out, w); break;
      case 4: panel<4, V>(g, a, b, out, w); break;
      case 3: panel<3, V>(g, a, b, out, w); break;
      case 2: panel<2, V>(g, a, b, out, w); break;
      default: panel<1, V>(g, a, b, out, w); break;
    }
  }
}

}  // namespace

void panel_gemm_avx512(const PanelGemm& g) {
  if (g.rows <= 0 || g.width <= 0) return;
  if (g.width <= 16) return rows_of_panels<12, 1>(g, 0, g.width);
  for (int64_t c0 = 0; c0 < g.width; c0 += 64) {
    const int64_t w = std::min<int64_t>(64, g.width - c0);
    if (w <= 16) {
      rows_of_panels<12, 1>(g, c0, w);
    } else if (w <= 32) {
      rows_of_panels<8, 2>(g, c0, w);
    } else {
      rows_of_panels<6, 4>(g, c0, w);
    }
  }
}

}  // namespace brioche::backend::cpu
