#include "backend/cpu/causal_conv1d_backward.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"

namespace brioche::backend::cpu {

// Two passes over row blocks: dp of every row (it needs the K rows up to
// it), then dx (the K rows from it on). Channels are the inner, contiguous
// loop; the kernel taps are read transposed ([K, channels]) so both loops
// run along rows of memory.
void causal_conv1d_silu_backward(const CausalConv1dBackwardArgs& a) {
  const int64_t C = a.channels, K = a.kernel;
  std::vector<float> wt(size_t(K * C));  // [K, C]
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < K; ++j) wt[size_t(j * C + c)] = a.weight[c * K + j];
  for (int64_t r = 0; r < a.n_rows; ++r) std::fill_n(a.dx + r * a.dx_stride, C, 0.0f);
  std::vector<float> dp(size_t(a.n_rows * C), 0.0f);
  for (const ops::RecurrentSequence& s : a.sequences) {
    const int64_t first = s.first_row, end = int64_t(s.first_row) + s.n_rows;
    ThreadPool::global().parallel_for(s.n_rows, 8, [&](int64_t i0, int64_t i1) {
      std::vector<float> p(static_cast<size_t>(C));
      for (int64_t t = first + i0; t < first + i1; ++t) {
        std::fill(p.begin(), p.end(), 0.0f);
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;
          const float* x = a.x + src * a.x_stride;
          if (src < first) {  // an input before the sequence: 0, or the state's row src − first + K − 1
            if (s.starts || a.state == nullptr) continue;
            x = a.state + (int64_t(s.state_slot) * (K - 1) + (src - first + K - 1)) * C;
          }
          const float* w = &wt[size_t(j * C)];
          for (int64_t c = 0; c < C; ++c) p[size_t(c)] += w[c] * x[c];
        }
        const float* d = a.dout + t * a.dout_stride;
        float* out = &dp[size_t(t * C)];
        for (int64_t c = 0; c < C; ++c) {
          const float sig = 1.0f / (1.0f + std::exp(-p[size_t(c)]));
          out[c] = d[c] * sig * (1.0f + p[size_t(c)] * (1.0f - sig));
        }
      }
    });
    ThreadPool::global().parallel_for(s.n_rows, 8, [&](int64_t i0, int64_t i1) {
      for (int64_t t = first + i0; t < first + i1; ++t) {
        float* dx = a.dx + t * a.dx_stride;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t dst = t + (K - 1) - j;  // the output row that read x[t] through tap j
          if (dst >= end) continue;
          const float* d = &dp[size_t(dst * C)];
          const float* w = &wt[size_t(j * C)];
          for (int64_t c = 0; c < C; ++c) dx[c] += w[c] * d[c];
        }
      }
    });
    if (s.starts || a.d_state == nullptr) continue;
    // State row i is the input at first − (K−1) + i: output row first + i − j read it through tap j.
    for (int64_t i = 0; i < K - 1; ++i) {
      float* ds = a.d_state + (int64_t(s.state_slot) * (K - 1) + i) * C;
      std::fill_n(ds, C, 0.0f);
      for (int64_t j = 0; j <= i; ++j) {
        const int64_t dst = first + i - j;
        if (dst >= end) continue;
        const float* d = &dp[size_t(dst * C)];
        const float* w = &wt[size_t(j * C)];
        for (int64_t c = 0; c < C; ++c) ds[c] += w[c] * d[c];
      }
    }
  }
}

}  // namespace brioche::backend::cpu
