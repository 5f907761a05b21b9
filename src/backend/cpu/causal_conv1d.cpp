#include "backend/cpu/causal_conv1d.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/vec_f32.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

namespace {

// silu(x) = x / (1 + e^-x) over n floats, in place.
void silu_in_place(float* x, int n) {
  int i = 0;
#if BRIOCHE_VEC_AVX2
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), v));
    _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
  }
#endif
  for (; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

// y[i] += a[i]·x[i] over n floats.
void mul_add(float* y, const float* a, const float* x, int n) {
  int i = 0;
#if BRIOCHE_VEC_AVX2
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] += a[i] * x[i];
}

}  // namespace

// One task per (sequence, block of channels). Channels are independent and
// contiguous in every row, so the inner loops run across channels (vector
// lanes) with the kernel's taps transposed to [kernel, block]: for row t,
//   out_t[c] = silu(Σ_j w[c][j] · in_{t-(K-1)+j}[c]),
// where in_s is row s of the sequence for s ≥ 0 and the state's row
// (K-1)+s (the inputs before the forward, oldest first) for s < 0.
void causal_conv1d_silu(const CausalConv1dArgs& a) {
  constexpr int kChannelBlock = 256;
  const int history = a.kernel - 1;
  const int n_blocks = (a.channels + kChannelBlock - 1) / kChannelBlock;
  const int n_tasks = int(a.sequences.size()) * n_blocks;
  ThreadPool::global().run(n_tasks, [&](int task) {
    const ops::RecurrentSequence& seq = a.sequences[size_t(task / n_blocks)];
    const int c0 = (task % n_blocks) * kChannelBlock;
    const int width = std::min(a.channels, c0 + kChannelBlock) - c0;
    float* state = a.state + int64_t(seq.state_slot) * history * a.channels + c0;
    if (seq.starts)
      for (int j = 0; j < history; ++j) std::fill_n(state + int64_t(j) * a.channels, width, 0.0f);
    thread_local std::vector<float> taps;  // [kernel, width]
    taps.resize(size_t(a.kernel) * size_t(width));
    for (int c = 0; c < width; ++c)
      for (int j = 0; j < a.kernel; ++j)
        taps[size_t(j) * size_t(width) + size_t(c)] = a.weight[int64_t(c0 + c) * a.kernel + j];
    auto input = [&](int64_t s) -> const float* {  // in_s of the block (s relative to the sequence's first row)
      return s >= 0 ? a.x + (seq.first_row + s) * a.x_stride + c0 : state + (history + s) * a.channels;
    };
    for (int32_t t = 0; t < seq.n_rows; ++t) {
      float* out = a.out + (seq.first_row + t) * a.out_stride + c0;
      std::fill_n(out, width, 0.0f);
      for (int j = 0; j < a.kernel; ++j) {
        mul_add(out, taps.data() + size_t(j) * size_t(width), input(int64_t(t) - history + j), width);
      }
      silu_in_place(out, width);
    }
    // Checkpoints first (they may read the old state): the K-1 inputs
    // before their position.
    for (const ops::StateCheckpoint& cp : seq.checkpoints) {
      float* copy = a.state + int64_t(cp.slot) * history * a.channels + c0;
      const int64_t t = cp.position - seq.first_position;
      for (int j = 0; j < history; ++j) std::copy_n(input(t - history + j), width, copy + int64_t(j) * a.channels);
    }
    // The new state: the last K-1 inputs. Ascending j reads state rows at
    // or after the one it writes, so the shift is safe in place.
    for (int j = 0; j < history; ++j) {
      const float* in = input(int64_t(seq.n_rows) - history + j);
      float* dst = state + int64_t(j) * a.channels;
      if (in != dst) std::copy_n(in, width, dst);
    }
  });
}

}  // namespace brioche::backend::cpu
