#include "backend/cpu/adamw.h"

#include <cmath>

#include "core/thread_pool.h"

namespace brioche::backend::cpu {

void adamw_step(std::span<const AdamWTensor> tensors, const AdamWConstants& k) {
  const float b1 = k.beta1, b2 = k.beta2;
  for (const AdamWTensor& t : tensors) {
    ThreadPool::global().parallel_for(t.n, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float g = k.grad_scale == 1.0f ? t.grad[i] : t.grad[i] * k.grad_scale;
        t.param[i] -= t.lr * k.weight_decay * t.param[i];
        t.m[i] = b1 * t.m[i] + (1.0f - b1) * g;
        t.v[i] = b2 * t.v[i] + (1.0f - b2) * g * g;
        t.param[i] -= t.lr * (t.m[i] / k.c1) / (std::sqrt(t.v[i] / k.c2) + k.eps);
      }
    });
  }
}

double sum_of_squares(std::span<const F32Block> blocks) {
  double sum = 0.0;
  for (const F32Block& b : blocks)
    for (int64_t i = 0; i < b.n; ++i) sum += double(b.data[i]) * b.data[i];
  return sum;
}

}  // namespace brioche::backend::cpu
