#include "backend/cpu/swiglu.h"

#include <cmath>

#include "backend/cpu/vec_f32.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

void swiglu(const SwigluArgs& a) {
  int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(a.dim, 1));
  ThreadPool::global().parallel_for(a.n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = a.gate + r * a.gate_stride;
      const float* u = a.up + r * a.up_stride;
      float* y = a.out + r * a.out_stride;
      int64_t i = 0;
#if BRIOCHE_VEC_AVX2
      // silu(g)·u = g / (1 + e^-g) · u, 8 at a time (e^x to a few ulp, vec_f32.h)
      const __m256 one = _mm256_set1_ps(1.0f);
      for (; i + 8 <= a.dim; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
      }
#endif
      for (; i < a.dim; ++i) {
        float gi = g[i];
        y[i] = gi / (1.0f + std::exp(-gi)) * u[i];
      }
    }
  });
}

}  // namespace brioche::backend::cpu
