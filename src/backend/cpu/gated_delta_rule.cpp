#include "backend/cpu/gated_delta_rule.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"

namespace brioche::backend::cpu {

namespace {

// x / √(Σx² + 1e-6), as transformers' l2norm (and FLA's kernels) compute it.
void l2_normalize(const float* x, int n, float scale, float* out) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += x[i] * x[i];
  const float inv = scale / std::sqrt(sum + 1e-6f);
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv;
}

}  // namespace

// One task per (sequence, value head): the head's dk × dv state stays in a
// local copy for all of the sequence's rows (written back once).
void gated_delta_rule(const GatedDeltaRuleArgs& a) {
  const int dk = a.key_dim, dv = a.value_dim, heads = a.n_v_heads;
  const int group = a.n_v_heads / a.n_k_heads;
  const float q_scale = 1.0f / std::sqrt(float(dk));
  const int n_tasks = int(a.sequences.size()) * heads;
  ThreadPool::global().run(n_tasks, [&](int task) {
    const ops::RecurrentSequence& seq = a.sequences[size_t(task / heads)];
    const int h = task % heads, kh = h / group;
    float* slot = a.state + (int64_t(seq.state_slot) * heads + h) * dk * dv;
    std::vector<float> s(size_t(dk) * size_t(dv));
    std::vector<float> q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk)), delta(static_cast<size_t>(dv));
    if (seq.starts)
      std::fill(s.begin(), s.end(), 0.0f);
    else
      std::memcpy(s.data(), slot, s.size() * sizeof(float));
    for (int32_t i = 0; i < seq.n_rows; ++i) {
      const int64_t row = seq.first_row + i;
      l2_normalize(a.q + row * a.q_stride + int64_t(kh) * dk, dk, q_scale, q.data());
      l2_normalize(a.k + row * a.k_stride + int64_t(kh) * dk, dk, 1.0f, k.data());
      const float* v = a.v + row * a.v_stride + int64_t(h) * dv;
      const float decay = std::exp(a.g[row * a.g_stride + h]);
      const float beta = a.beta[row * a.beta_stride + h];
      // S ← decay·S and Sᵀk in one pass over the rows of S.
      std::fill(delta.begin(), delta.end(), 0.0f);
      for (int r = 0; r < dk; ++r) {
        float* sr = s.data() + int64_t(r) * dv;
        const float kr = k[size_t(r)];
        for (int c = 0; c < dv; ++c) {
          sr[c] *= decay;
          delta[size_t(c)] += sr[c] * kr;
        }
      }
      for (int c = 0; c < dv; ++c) delta[size_t(c)] = (v[c] - delta[size_t(c)]) * beta;
      // S ← S + k δᵀ and out = Sᵀq in one more pass.
      float* o = a.out + row * a.out_stride + int64_t(h) * dv;
      std::fill(o, o + dv, 0.0f);
      for (int r = 0; r < dk; ++r) {
        float* sr = s.data() + int64_t(r) * dv;
        const float kr = k[size_t(r)], qr = q[size_t(r)];
        for (int c = 0; c < dv; ++c) {
          sr[c] += kr * delta[size_t(c)];
          o[c] += sr[c] * qr;
        }
      }
    }
    std::memcpy(slot, s.data(), s.size() * sizeof(float));
  });
}

void delta_rule_gates(const DeltaRuleGatesArgs& a) {
  for (int64_t r = 0; r < a.n_rows; ++r) {
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const float x = a.a[r * a.a_stride + h] + a.dt_bias[h];
      // torch's softplus (beta 1, threshold 20): x above 20 is returned as is.
      const float softplus = x > 20.0f ? x : std::log1p(std::exp(x));
      a.g[r * a.g_stride + h] = -std::exp(a.a_log[h]) * softplus;
      a.beta[r * a.beta_stride + h] = 1.0f / (1.0f + std::exp(-a.b[r * a.b_stride + h]));
    }
  }
}

}  // namespace brioche::backend::cpu
