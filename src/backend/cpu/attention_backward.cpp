#include "backend/cpu/attention_backward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/vec_f32.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

namespace {

// Whether key row j (absolute) is visible from query row i, both in one span.
struct Visibility {
  const ops::DenseAttentionLayout& layout;
  int window;
  bool operator()(int64_t i, int64_t j) const {
    if (j > i) return false;
    if (!layout.branch.empty()) {
      const uint8_t bj = layout.branch[j];
      if (bj != 0 && bj != layout.branch[i]) return false;
    }
    if (window > 0 && layout.positions[i] - layout.positions[j] >= window) return false;
    return true;
  }
};

}  // namespace

void dense_attention(const DenseAttentionArgs& a) {
  if (::brioche::cpu::active_isa() >= ::brioche::cpu::Isa::Avx512) return dense_attention_avx512(a);
  const auto& p = a.params;
  const int d = p.head_dim, group = p.n_heads / p.n_kv_heads;
  const Visibility visible{a.layout, p.sliding_window};
  const int64_t n_tasks = int64_t(a.layout.spans.size()) * p.n_heads;
  ThreadPool::global().parallel_for(n_tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, weights;  // [span rows] for one query row
    for (int64_t t = begin; t < end; ++t) {
      const auto& span = a.layout.spans[size_t(t / p.n_heads)];
      const int h = int(t % p.n_heads), kvh = h / group;
      scores.resize(size_t(span.n_rows));
      for (int64_t i = span.first_row; i < span.first_row + span.n_rows; ++i) {
        const float* qi = a.q + i * a.ld_q + h * d;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = span.first_row; j <= i; ++j) {
          float s = -std::numeric_limits<float>::infinity();
          if (visible(i, j)) s = p.scale * dot_f32(qi, a.k + j * a.ld_k + kvh * d, d);
          scores[size_t(j - span.first_row)] = s;
          m = std::max(m, s);
        }
        float* oi = a.out_w + i * a.ld_out + h * d;
        std::memset(oi, 0, sizeof(float) * size_t(d));
        const int64_t n_keys = i - span.first_row + 1;
        std::vector<float>& e = weights;
        e.resize(size_t(n_keys));
        exp_shifted_f32(scores.data(), m, e.data(), n_keys);
        float sum = 0.0f;
        for (int64_t j = span.first_row; j <= i; ++j) {
          if (scores[size_t(j - span.first_row)] == -std::numeric_limits<float>::infinity()) continue;  // masked
          const float ej = e[size_t(j - span.first_row)];
          sum += ej;
          axpy_f32(oi, ej, a.v + j * a.ld_v + kvh * d, d);
        }
        const float inv = 1.0f / sum;
        for (int c = 0; c < d; ++c) oi[c] *= inv;
        a.lse_w[i * a.ld_lse + h] = m + std::log(sum);
      }
    }
  });
}

// One task per (span, KV head): it owns dk/dv of that head in that span, so
// the query heads of its GQA group accumulate there without races.
void dense_attention_backward(const DenseAttentionArgs& a) {
  if (::brioche::cpu::active_isa() >= ::brioche::cpu::Isa::Avx512) return dense_attention_backward_avx512(a);
  const auto& p = a.params;
  const int d = p.head_dim, group = p.n_heads / p.n_kv_heads;
  const Visibility visible{a.layout, p.sliding_window};
  const int64_t n_tasks = int64_t(a.layout.spans.size()) * p.n_kv_heads;
  ThreadPool::global().parallel_for(n_tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> probs;  // [span rows] for one query row
    for (int64_t t = begin; t < end; ++t) {
      const auto& span = a.layout.spans[size_t(t / p.n_kv_heads)];
      const int kvh = int(t % p.n_kv_heads);
      const int64_t r0 = span.first_row, r1 = span.first_row + span.n_rows;
      for (int64_t j = r0; j < r1; ++j) {
        std::memset(a.dk + j * a.ld_dk + kvh * d, 0, sizeof(float) * size_t(d));
        std::memset(a.dv + j * a.ld_dv + kvh * d, 0, sizeof(float) * size_t(d));
      }
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t i = r0; i < r1; ++i) {
          const float* qi = a.q + i * a.ld_q + h * d;
          const float* oi = a.out + i * a.ld_out + h * d;
          const float* doi = a.dout + i * a.ld_dout + h * d;
          float* dqi = a.dq + i * a.ld_dq + h * d;
          std::memset(dqi, 0, sizeof(float) * size_t(d));
          const float lse = a.lse[i * a.ld_lse + h];
          const float D = dot_f32(doi, oi, d);
          // p_ij = e^(scale·q_i·k_j − lse_i), the exponentials in one vector pass
          probs.resize(size_t(i - r0 + 1));
          for (int64_t j = r0; j <= i; ++j)
            probs[size_t(j - r0)] = p.scale * dot_f32(qi, a.k + j * a.ld_k + kvh * d, d);
          exp_shifted_f32(probs.data(), lse, probs.data(), i - r0 + 1);
          for (int64_t j = r0; j <= i; ++j) {
            if (!visible(i, j)) continue;
            const float* kj = a.k + j * a.ld_k + kvh * d;
            const float* vj = a.v + j * a.ld_v + kvh * d;
            const float pij = probs[size_t(j - r0)];
            const float ds = pij * (dot_f32(doi, vj, d) - D);
            axpy_f32(a.dv + j * a.ld_dv + kvh * d, pij, doi, d);
            axpy_f32(dqi, p.scale * ds, kj, d);
            axpy_f32(a.dk + j * a.ld_dk + kvh * d, p.scale * ds, qi, d);
          }
        }
      }
    }
  });
}

}  // namespace brioche::backend::cpu
