#include "backend/cpu/add.h"

#include "core/thread_pool.h"

namespace brioche::backend::cpu {

void add(const AddArgs& a) {
  int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(a.dim, 1));
  ThreadPool::global().parallel_for(a.n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = a.a + r * a.a_stride;
      const float* y = a.b + r * a.b_stride;
      float* z = a.out + r * a.out_stride;
      for (int64_t i = 0; i < a.dim; ++i) z[i] = x[i] + y[i];
    }
  });
}

void add_bias(float* x, const float* bias, int64_t n_rows, int64_t dim, int64_t x_stride) {
  int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(dim, 1));
  ThreadPool::global().parallel_for(n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = x + r * x_stride;
      for (int64_t i = 0; i < dim; ++i) row[i] += bias[i];
    }
  });
}

}  // namespace brioche::backend::cpu
