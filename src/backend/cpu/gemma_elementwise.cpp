#include "backend/cpu/gemma_elementwise.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"

namespace brioche::backend::cpu {

namespace {

// gelu_tanh(g) = ½·g·(1 + tanh(√(2/π)·(g + 0.044715·g³))), torch's
// gelu(approximate="tanh") ("gelu_pytorch_tanh"), in f32 as torch computes it.
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

}  // namespace

void gelu_tanh_mul(const GeluTanhMulArgs& a) {
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(a.dim, 1));
  ThreadPool::global().parallel_for(a.n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = a.gate + r * a.gate_stride;
      const float* u = a.up + r * a.up_stride;
      float* y = a.out + r * a.out_stride;
      for (int64_t i = 0; i < a.dim; ++i) {
        const float x = g[i];
        const float inner = kSqrt2OverPi * (x + kCubic * x * x * x);
        y[i] = 0.5f * x * (1.0f + std::tanh(inner)) * u[i];
      }
    }
  });
}

void gelu_tanh_mul_backward(const GeluTanhMulBackwardArgs& a) {
  // With t = tanh(c·(g + k·g³)):  gelu(g) = ½·g·(1 + t),
  //   gelu'(g) = ½·(1 + t) + ½·g·(1 − t²)·c·(1 + 3k·g²).
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(a.dim, 1));
  ThreadPool::global().parallel_for(a.n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = a.gate + r * a.gate_stride;
      const float* u = a.up + r * a.up_stride;
      const float* dy = a.dout + r * a.dout_stride;
      float* dg = a.dgate + r * a.dgate_stride;
      float* du = a.dup ? a.dup + r * a.dup_stride : nullptr;
      for (int64_t i = 0; i < a.dim; ++i) {
        const float x = g[i], d = dy[i];
        const float t = std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x));
        const float gelu = 0.5f * x * (1.0f + t);
        const float slope =
            0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
        const float up = u[i];
        if (du) du[i] = d * gelu;
        dg[i] = d * up * slope;
      }
    }
  });
}

void softcap(const SoftcapArgs& a) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(a.dim, 1));
  ThreadPool::global().parallel_for(a.n_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* x = a.x + r * a.x_stride;
      // transformers divides, not multiplies by the inverse: x / cap.
      for (int64_t i = 0; i < a.dim; ++i) x[i] = a.cap * std::tanh(x[i] / a.cap);
    }
  });
}

}  // namespace brioche::backend::cpu
