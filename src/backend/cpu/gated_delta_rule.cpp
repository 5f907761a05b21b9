#include "backend/cpu/gated_delta_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/vec_f32.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

namespace {

// x / √(Σx² + 1e-6), as transformers' l2norm (and FLA's kernels) compute it.
void l2_normalize(const float* x, int n, float scale, float* out) {
  const float inv = scale / std::sqrt(dot_f32(x, x, n) + 1e-6f);
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv;
}

// Per-thread scratch for one chunk: q̂, k̂, w [C, dk], u [C, dv] (then V'),
// decays and gates [C]. Grown, never shrunk: decode steps allocate nothing.
struct ChunkScratch {
  std::vector<float> q, k, w, u, decay, gamma, beta;
  void reserve(int chunk, int dk, int dv) {
    const size_t c = size_t(chunk);
    for (std::vector<float>* v : {&q, &k, &w})
      if (v->size() < c * size_t(dk)) v->resize(c * size_t(dk));
    if (u.size() < c * size_t(dv)) u.resize(c * size_t(dv));
    for (std::vector<float>* v : {&decay, &gamma, &beta})
      if (v->size() < c) v->resize(c);
  }
};

// One task's view: a value head h of one sequence and its state S [dk, dv]
// (row r of S is S[r·dv ..]), updated in place in its slot.
struct HeadTask {
  const GatedDeltaRuleArgs& a;
  int h, kh, dk, dv;
  float q_scale;
  float* s;
  float *q, *k, *w, *u, *decay, *gamma, *beta;

  HeadTask(const GatedDeltaRuleArgs& args, int head, float* state, ChunkScratch& scratch)
      : a(args),
        h(head),
        kh(head / (args.n_v_heads / args.n_k_heads)),
        dk(args.key_dim),
        dv(args.value_dim),
        q_scale(1.0f / std::sqrt(float(args.key_dim))),
        s(state),
        q(scratch.q.data()),
        k(scratch.k.data()),
        w(scratch.w.data()),
        u(scratch.u.data()),
        decay(scratch.decay.data()),
        gamma(scratch.gamma.data()),
        beta(scratch.beta.data()) {}

  const float* q_in(int64_t row) const { return a.q + row * a.q_stride + int64_t(kh) * dk; }
  const float* k_in(int64_t row) const { return a.k + row * a.k_stride + int64_t(kh) * dk; }
  const float* v_in(int64_t row) const { return a.v + row * a.v_stride + int64_t(h) * dv; }
  float* out_row(int64_t row) const { return a.out + row * a.out_stride + int64_t(h) * dv; }
  float* s_row(int r) const { return s + int64_t(r) * dv; }

  // The recurrent form, one row (see ops/gated_delta_rule.h):
  //   S ← e^g·S;  δ = β(v − Sᵀk);  S ← S + kδᵀ;  out = Sᵀq.
  void recurrent_row(int64_t row) {
    float* qn = q;
    float* kn = k;
    float* delta = u;
    l2_normalize(q_in(row), dk, q_scale, qn);
    l2_normalize(k_in(row), dk, 1.0f, kn);
    const float decay = std::exp(a.g[row * a.g_stride + h]);
    const float b = a.beta[row * a.beta_stride + h];
    std::fill_n(delta, dv, 0.0f);
    for (int r = 0; r < dk; ++r) {
      scale_f32(s_row(r), decay, dv);
      axpy_f32(delta, kn[r], s_row(r), dv);
    }
    const float* v = v_in(row);
    for (int c = 0; c < dv; ++c) delta[c] = (v[c] - delta[c]) * b;
    float* o = out_row(row);
    std::fill_n(o, dv, 0.0f);
    for (int r = 0; r < dk; ++r) {
      axpy_f32(s_row(r), kn[r], delta, dv);
      axpy_f32(o, qn[r], s_row(r), dv);
    }
  }

  // The chunked form over m consecutive rows (transformers'
  // torch_chunk_gated_delta_rule for one chunk), with γ_i = Σ_{j≤i} g_j the
  // cumulative log decay inside the chunk and S the state before it:
  //   A_ij = β_i (k̂_i·k̂_j) e^{γ_i−γ_j}          (j < i; the UT system I + A)
  //   U = (I + A)⁻¹ diag(β) V,   W = (I + A)⁻¹ diag(β e^γ) K̂   (forward substitution)
  //   V' = U − W S                                 (the deltas once S is read)
  //   out_i = e^{γ_i} q̂_iᵀS + Σ_{j≤i} (q̂_i·k̂_j) e^{γ_i−γ_j} V'_j
  //   S ← e^{γ_m} S + Σ_j e^{γ_m−γ_j} k̂_j V'_jᵀ
  // Equal to m recurrent rows in exact arithmetic; it reads and writes S
  // three times per chunk instead of twice per row.
  void chunk_rows(int64_t first, int m) {
    float g_sum = 0.0f;
    for (int i = 0; i < m; ++i) {
      const int64_t row = first + i;
      l2_normalize(q_in(row), dk, q_scale, q + int64_t(i) * dk);
      l2_normalize(k_in(row), dk, 1.0f, k + int64_t(i) * dk);
      g_sum += a.g[row * a.g_stride + h];
      gamma[i] = g_sum;
      beta[i] = a.beta[row * a.beta_stride + h];
    }
    // A (strictly lower) and the forward substitution for U and W, row by row.
    for (int i = 0; i < m; ++i) {
      const float* ki = k + int64_t(i) * dk;
      float* ui = u + int64_t(i) * dv;
      float* wi = w + int64_t(i) * dk;
      const float* v = v_in(first + i);
      const float bi = beta[i], ei = std::exp(gamma[i]);
      for (int c = 0; c < dv; ++c) ui[c] = bi * v[c];
      for (int r = 0; r < dk; ++r) wi[r] = bi * ei * ki[r];
      for (int j = 0; j < i; ++j) {
        const float aij = bi * dot_f32(ki, k + int64_t(j) * dk, dk) * std::exp(gamma[i] - gamma[j]);
        axpy_f32(ui, -aij, u + int64_t(j) * dv, dv);
        axpy_f32(wi, -aij, w + int64_t(j) * dk, dk);
      }
    }
    // V' = U − W S and the inter-chunk part of the output, e^{γ_i} q̂_iᵀS,
    // in one pass over S per row.
    for (int i = 0; i < m; ++i) {
      float* ui = u + int64_t(i) * dv;
      const float* wi = w + int64_t(i) * dk;
      const float* qi = q + int64_t(i) * dk;
      float* o = out_row(first + i);
      const float ei = std::exp(gamma[i]);
      std::fill_n(o, dv, 0.0f);
      for (int r = 0; r < dk; ++r) {
        axpy_f32(ui, -wi[r], s_row(r), dv);
        axpy_f32(o, ei * qi[r], s_row(r), dv);
      }
    }
    // The intra-chunk part: Σ_{j≤i} (q̂_i·k̂_j) e^{γ_i−γ_j} V'_j.
    for (int i = 0; i < m; ++i) {
      const float* qi = q + int64_t(i) * dk;
      float* o = out_row(first + i);
      for (int j = 0; j <= i; ++j) {
        const float p = dot_f32(qi, k + int64_t(j) * dk, dk) * std::exp(gamma[i] - gamma[j]);
        axpy_f32(o, p, u + int64_t(j) * dv, dv);
      }
    }
    // S ← e^{γ_m} S + Σ_j e^{γ_m−γ_j} k̂_j V'_jᵀ, a row of S at a time (it
    // stays in L1 while the m deltas stream past).
    const float g_end = gamma[m - 1];
    for (int j = 0; j < m; ++j) decay[j] = std::exp(g_end - gamma[j]);
    const float end_decay = std::exp(g_end);
    for (int r = 0; r < dk; ++r) {
      float* sr = s_row(r);
      scale_f32(sr, end_decay, dv);
      for (int j = 0; j < m; ++j) axpy_f32(sr, decay[j] * k[int64_t(j) * dk + r], u + int64_t(j) * dv, dv);
    }
  }
};

}  // namespace

// One task per (sequence, value head), updating the head's dk × dv state in
// its slot. Rows go by chunks aligned to positions that are multiples of
// chunk_size; a chunk of one row (a decode step) takes the recurrent form.
void gated_delta_rule(const GatedDeltaRuleArgs& a) {
  const int dk = a.key_dim, dv = a.value_dim, heads = a.n_v_heads;
  const int chunk = std::max(a.chunk_size, 1);
  const int n_tasks = int(a.sequences.size()) * heads;
  ThreadPool::global().run(n_tasks, [&](int task) {
    const ops::RecurrentSequence& seq = a.sequences[size_t(task / heads)];
    const int h = task % heads;
    float* s = a.state + (int64_t(seq.state_slot) * heads + h) * dk * dv;
    if (seq.starts) std::fill_n(s, int64_t(dk) * dv, 0.0f);
    thread_local ChunkScratch scratch;
    scratch.reserve(chunk, dk, dv);
    HeadTask t(a, h, s, scratch);
    for (int32_t i = 0; i < seq.n_rows;) {
      const int64_t position = int64_t(seq.first_position) + i;
      const int m = int(std::min<int64_t>(seq.n_rows - i, chunk - position % chunk));
      if (m == 1) {
        t.recurrent_row(seq.first_row + i);
      } else {
        t.chunk_rows(seq.first_row + i, m);
      }
      i += m;
    }
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
