#include "backend/cpu/sigmoid_gate.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"

namespace brioche::backend::cpu {

void sigmoid_gate(const SigmoidGateArgs& a) {
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(a.dim, 1));
  ThreadPool::global().parallel_for(a.n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = a.gate + r * a.gate_stride;
      float* x = a.x + r * a.x_stride;
      for (int64_t i = 0; i < a.dim; ++i) x[i] *= 1.0f / (1.0f + std::exp(-g[a.per_row ? 0 : i]));
    }
  });
}

}  // namespace brioche::backend::cpu
