#include "backend/cpu/rope.h"

#include <cmath>
#include <vector>

#include "core/thread_pool.h"

namespace brioche::backend::cpu {

void rope(const RopeArgs& a) {
  const int half = a.head_dim / 2;
  ThreadPool::global().parallel_for(a.n_rows, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> cos_t(half), sin_t(half);
    for (int64_t r = begin; r < end; ++r) {
      // The angle is rounded to f32 before cos/sin, as the reference
      // implementations (torch, llama.cpp) do, so long positions agree.
      float p = float(a.positions[r]);
      for (int i = 0; i < half; ++i) {
        float angle = p * a.inv_freq[i];
        cos_t[i] = std::cos(angle);
        sin_t[i] = std::sin(angle);
      }
      float* row = a.x + r * a.x_stride;
      for (int h = 0; h < a.n_heads; ++h) {
        float* x = row + int64_t(h) * a.head_dim;
        if (a.interleaved) {
          for (int i = 0; i < half; ++i) {
            float x0 = x[2 * i], x1 = x[2 * i + 1];
            x[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
            x[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
          }
        } else {
          for (int i = 0; i < half; ++i) {
            float x0 = x[i], x1 = x[i + half];
            x[i] = x0 * cos_t[i] - x1 * sin_t[i];
            x[i + half] = x0 * sin_t[i] + x1 * cos_t[i];
          }
        }
      }
    }
  });
}

}  // namespace brioche::backend::cpu
