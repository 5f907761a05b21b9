#include "backend/cpu/swiglu.h"

#include <cmath>

#include "core/thread_pool.h"

namespace brioche::backend::cpu {

void swiglu(const SwigluArgs& a) {
  int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(a.dim, 1));
  ThreadPool::global().parallel_for(a.n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = a.gate + r * a.gate_stride;
      const float* u = a.up + r * a.up_stride;
      float* y = a.out + r * a.out_stride;
      for (int64_t i = 0; i < a.dim; ++i) {
        float gi = g[i];
        y[i] = gi / (1.0f + std::exp(-gi)) * u[i];
      }
    }
  });
}

}  // namespace brioche::backend::cpu
