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

void sigmoid_gate_backward(const SigmoidGateBackwardArgs& a) {
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(a.dim, 1));
  ThreadPool::global().parallel_for(a.n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = a.gate + r * a.gate_stride;
      const float* x = a.x + r * a.x_stride;
      const float* dy = a.dy + r * a.dy_stride;
      float* dx = a.dx + r * a.dx_stride;
      float* dg = a.dgate + r * a.dgate_stride;
      double row_sum = 0.0;
      for (int64_t i = 0; i < a.dim; ++i) {
        const float s = 1.0f / (1.0f + std::exp(-g[a.per_row ? 0 : i]));
        const float d = dy[i] * x[i] * s * (1.0f - s);
        if (a.per_row) {
          row_sum += d;
        } else {
          dg[i] = d;
        }
        dx[i] = dy[i] * s;
      }
      if (a.per_row) dg[0] = float(row_sum);
    }
  });
}

}  // namespace brioche::backend::cpu
