#include "backend/cpu/logp_head.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/thread_pool.h"

namespace brioche::backend::cpu {

void logp_chunk_update(const LogpChunk& c, float* run_max, float* run_sum, float* target_logit) {
  ThreadPool::global().parallel_for(c.n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* zi = c.z + i * c.ldz;
      float mc = -std::numeric_limits<float>::infinity();
      for (int64_t v = 0; v < c.width; ++v) mc = std::max(mc, zi[v]);
      const float m_new = std::max(run_max[i], mc);
      float sum = 0.0f;
      for (int64_t v = 0; v < c.width; ++v) sum += std::exp(zi[v] - m_new);
      run_sum[i] = run_sum[i] * std::exp(run_max[i] - m_new) + sum;
      run_max[i] = m_new;
      const int32_t t = c.targets[i];
      if (t >= c.v0 && t < c.v0 + c.width) target_logit[i] = zi[t - c.v0];
    }
  });
}

void logp_chunk_grad(const LogpChunk& c, const float* lse, const float* d_logp) {
  ThreadPool::global().parallel_for(c.n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float* zi = c.z + i * c.ldz;
      const float g = d_logp[i], l = lse[i];
      for (int64_t v = 0; v < c.width; ++v) zi[v] = -g * std::exp(zi[v] - l);
      const int32_t t = c.targets[i];
      if (t >= c.v0 && t < c.v0 + c.width) zi[t - c.v0] += g;
    }
  });
}

}  // namespace brioche::backend::cpu
