#include "backend/cpu/rms_norm.h"

#include <cmath>

#include "backend/cpu/vec_f32.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

void rms_norm(const RmsNormArgs& a) {
  // Rows are independent; split when there is enough work to pay for dispatch.
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(a.dim, 1));
  ThreadPool::global().parallel_for(a.n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = a.x + r * a.x_stride;
      float* y = a.out + r * a.out_stride;
      float mean_sq = dot_f32(x, x, a.dim) / float(a.dim);
      float inv_rms = 1.0f / std::sqrt(mean_sq + a.eps);
      for (int64_t i = 0; i < a.dim; ++i) y[i] = x[i] * inv_rms * a.weight[i];
    }
  });
}

}  // namespace brioche::backend::cpu
