#include "backend/cpu/causal_conv1d.h"

#include <cmath>
#include <vector>

#include "core/thread_pool.h"

namespace brioche::backend::cpu {

// One task per (sequence, block of channels): each channel's sliding window
// of K inputs lives in registers/stack, the state is read once and written
// once. Rows of a sequence are inherently sequential in time but channels
// are independent.
void causal_conv1d_silu(const CausalConv1dArgs& a) {
  constexpr int kChannelBlock = 64;
  const int history = a.kernel - 1;
  const int n_blocks = (a.channels + kChannelBlock - 1) / kChannelBlock;
  const int n_tasks = int(a.sequences.size()) * n_blocks;
  ThreadPool::global().run(n_tasks, [&](int task) {
    const ops::RecurrentSequence& seq = a.sequences[size_t(task / n_blocks)];
    const int c0 = (task % n_blocks) * kChannelBlock;
    const int c1 = std::min(a.channels, c0 + kChannelBlock);
    float* state = a.state + int64_t(seq.state_slot) * history * a.channels;
    std::vector<float> window(size_t(a.kernel));  // inputs t-(K-1) .. t of one channel
    for (int c = c0; c < c1; ++c) {
      const float* w = a.weight + int64_t(c) * a.kernel;
      for (int j = 0; j < history; ++j) window[size_t(j)] = seq.starts ? 0.0f : state[int64_t(j) * a.channels + c];
      for (int32_t i = 0; i < seq.n_rows; ++i) {
        const int64_t row = seq.first_row + i;
        window[size_t(history)] = a.x[row * a.x_stride + c];
        float acc = 0.0f;
        for (int j = 0; j < a.kernel; ++j) acc += w[j] * window[size_t(j)];
        a.out[row * a.out_stride + c] = acc / (1.0f + std::exp(-acc));
        for (int j = 0; j < history; ++j) window[size_t(j)] = window[size_t(j) + 1];
      }
      for (int j = 0; j < history; ++j) state[int64_t(j) * a.channels + c] = window[size_t(j)];
    }
  });
}

}  // namespace brioche::backend::cpu
