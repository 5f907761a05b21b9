#include "backend/cpu/layer_backward.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"

namespace brioche::backend::cpu {

void rms_norm_backward(const RmsNormBackwardArgs& a) {
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(a.dim, 1));
  ThreadPool::global().parallel_for(a.n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const float* x = a.x + row * a.x_stride;
      const float* dy = a.dy + row * a.dy_stride;
      float* dx = a.dx + row * a.dx_stride;
      double sum_sq = 0.0, dot = 0.0;  // Σ x², Σ (w⊙dy)·x
      for (int64_t i = 0; i < a.dim; ++i) {
        sum_sq += double(x[i]) * x[i];
        dot += double(a.weight[i]) * dy[i] * x[i];
      }
      const double r = 1.0 / std::sqrt(sum_sq / double(a.dim) + a.eps);
      const float c1 = float(r);
      const float c2 = float(r * r * r * dot / double(a.dim));
      for (int64_t i = 0; i < a.dim; ++i) dx[i] += c1 * a.weight[i] * dy[i] - c2 * x[i];
    }
  });
}

void swiglu_backward(const SwigluBackwardArgs& a) {
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(a.dim, 1));
  ThreadPool::global().parallel_for(a.n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const float* g = a.gate + row * a.ld_gate;
      const float* u = a.up + row * a.ld_up;
      const float* d = a.dout + row * a.ld_dout;
      float* dg = a.dgate + row * a.ld_dgate;
      float* du = a.dup + row * a.ld_dup;
      for (int64_t i = 0; i < a.dim; ++i) {
        const float gi = g[i], ui = u[i], di = d[i];
        const float sig = 1.0f / (1.0f + std::exp(-gi));
        const float silu = gi * sig;
        du[i] = di * silu;
        dg[i] = di * ui * sig * (1.0f + gi * (1.0f - sig));
      }
    }
  });
}

}  // namespace brioche::backend::cpu
