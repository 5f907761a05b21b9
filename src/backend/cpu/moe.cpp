#include "backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/thread_pool.h"

namespace brioche::backend::cpu {

void moe_route(const MoeRouteArgs& a) {
  ThreadPool::global().parallel_for(a.n_rows, 64, [&](int64_t begin, int64_t end) {
    std::vector<float> p(size_t(a.n_experts));
    std::vector<int32_t> order(size_t(a.n_experts));
    for (int64_t r = begin; r < end; ++r) {
      // softmax over the experts (f32, max subtracted)
      const float* z = a.logits + r * a.logits_stride;
      const float zmax = *std::max_element(z, z + a.n_experts);
      float sum = 0.0f;
      for (int e = 0; e < a.n_experts; ++e) sum += (p[size_t(e)] = std::exp(z[e] - zmax));
      for (float& v : p) v /= sum;
      // top-k by probability; equal probabilities: the lower expert first
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + a.top_k, order.end(), [&](int32_t x, int32_t y) {
        return p[size_t(x)] > p[size_t(y)] || (p[size_t(x)] == p[size_t(y)] && x < y);
      });
      float top_sum = 0.0f;
      for (int k = 0; k < a.top_k; ++k) top_sum += p[size_t(order[size_t(k)])];
      for (int k = 0; k < a.top_k; ++k) {
        const int32_t e = order[size_t(k)];
        a.expert[r * a.top_k + k] = e;
        // renormalised over the chosen experts, then the expert's own scale
        a.weight[r * a.top_k + k] = p[size_t(e)] / top_sum * a.per_expert_scale[e];
      }
    }
  });
}

void scale_rows(const ScaleRowsArgs& a) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(a.dim, 1));
  ThreadPool::global().parallel_for(a.n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* x = a.x + r * a.x_stride;
      for (int64_t i = 0; i < a.dim; ++i) x[i] *= a.scale[r];
    }
  });
}

}  // namespace brioche::backend::cpu
