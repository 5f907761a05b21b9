#include "backend/cpu/logp_head.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/logp_head_kernels.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

void logp_chunk_update(const LogpChunk& c, float* run_max, float* run_sum, float* target_logit) {
  const bool wide = ::brioche::cpu::active_isa() >= ::brioche::cpu::Isa::Avx512;
  ThreadPool::global().parallel_for(c.n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* zi = c.z + i * c.ldz;
      float m_new, sum = 0.0f;
      if (wide) {
        const LogpRowSums r = logp_row_sums_avx512(zi, c.width, run_max[i]);
        m_new = r.max, sum = r.sum;
      } else {
        float mc = -std::numeric_limits<float>::infinity();
        for (int64_t v = 0; v < c.width; ++v) mc = std::max(mc, zi[v]);
        m_new = std::max(run_max[i], mc);
        for (int64_t v = 0; v < c.width; ++v) sum += std::exp(zi[v] - m_new);
      }
      run_sum[i] = run_sum[i] * std::exp(run_max[i] - m_new) + sum;
      run_max[i] = m_new;
      const int32_t t = c.targets[i];
      if (t >= c.v0 && t < c.v0 + c.width) target_logit[i] = zi[t - c.v0];
    }
  });
}

void logp_chunk_grad(const LogpChunk& c, const float* lse, const float* d_logp) {
  const bool wide = ::brioche::cpu::active_isa() >= ::brioche::cpu::Isa::Avx512;
  ThreadPool::global().parallel_for(c.n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float* zi = c.z + i * c.ldz;
      const float g = d_logp[i], l = lse[i];
      if (wide)
        logp_row_grad_avx512(zi, c.width, g, l);
      else
        for (int64_t v = 0; v < c.width; ++v) zi[v] = -g * std::exp(zi[v] - l);
      const int32_t t = c.targets[i];
      if (t >= c.v0 && t < c.v0 + c.width) zi[t - c.v0] += g;
    }
  });
}

}  // namespace brioche::backend::cpu
