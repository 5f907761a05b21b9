#include "backend/cpu/softmax.h"

#include <cmath>
#include <limits>

#include "backend/cpu/vec_f32.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

void softmax(float* x, int64_t n_rows, int64_t n, int64_t stride) {
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1));
  ThreadPool::global().parallel_for(n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = x + r * stride;
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < n; ++i) max = std::max(max, row[i]);
      if (max == -std::numeric_limits<float>::infinity()) {
        for (int64_t i = 0; i < n; ++i) row[i] = 0.0f;  // nothing visible
        continue;
      }
      // Sum in double: over a 150k vocabulary f32 accumulation loses digits.
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        row[i] = std::exp(row[i] - max);
        sum += row[i];
      }
      scale_f32(row, float(1.0 / sum), n);
    }
  });
}

}  // namespace brioche::backend::cpu
