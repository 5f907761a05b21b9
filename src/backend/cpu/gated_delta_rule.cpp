#include "backend/cpu/gated_delta_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/delta_rule_gemm.h"
#include "backend/cpu/vec_f32.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

namespace {

// x / √(Σx² + 1e-6), as transformers' l2norm (and FLA's kernels) compute it.
void l2_normalize(const float* x, int n, float scale, float* out) {
  const float inv = scale / std::sqrt(dot_f32(x, x, n) + 1e-6f);
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv;
}

// Per-thread scratch for one chunk of C rows, grown, never shrunk (decode
// steps allocate nothing): q̂, k̂, w, kb [C, dk]; u, vb [C, dv]; t, p [C, C];
// kd [dk, C]; γ, β [C].
struct ChunkScratch {
  std::vector<float> q, k, w, kb, u, vb, t, p, kd, gamma, beta;
  void reserve(int chunk, int dk, int dv) {
    const size_t c = size_t(chunk);
    auto grow = [](std::vector<float>& v, size_t n) {
      if (v.size() < n) v.resize(n);
    };
    for (std::vector<float>* v : {&q, &k, &w, &kb, &kd}) grow(*v, c * size_t(dk));
    for (std::vector<float>* v : {&u, &vb}) grow(*v, c * size_t(dv));
    for (std::vector<float>* v : {&t, &p}) grow(*v, c * c);
    for (std::vector<float>* v : {&gamma, &beta}) grow(*v, c);
  }
};

// One task's view: a value head h of one sequence and its state S [dk, dv]
// (row r of S is S[r·dv ..]), updated in place in its slot.
struct HeadTask {
  const GatedDeltaRuleArgs& a;
  int h, kh, dk, dv;
  float q_scale;
  float* s;
  float *q, *k, *w, *kb, *u, *vb, *t, *p, *kd, *gamma, *beta;

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
        kb(scratch.kb.data()),
        u(scratch.u.data()),
        vb(scratch.vb.data()),
        t(scratch.t.data()),
        p(scratch.p.data()),
        kd(scratch.kd.data()),
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
  //   U = (I + A)⁻¹ diag(β) V,   W = (I + A)⁻¹ diag(β e^γ) K̂
  //   V' = U − W S                                 (the deltas once S is read)
  //   out_i = e^{γ_i} q̂_iᵀS + Σ_{j≤i} (q̂_i·k̂_j) e^{γ_i−γ_j} V'_j
  //   S ← e^{γ_m} S + Σ_j e^{γ_m−γ_j} k̂_j V'_jᵀ
  // Equal to m recurrent rows in exact arithmetic; it reads S twice and
  // writes it once per chunk instead of twice per row, and every product is
  // a small matrix product (accumulate_rows).
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
    // T = (I + A)⁻¹ (unit lower triangular, zero above): row i is
    // e_i − Σ_{j<i} A_ij T_j. And P_ij = (q̂_i·k̂_j) e^{γ_i−γ_j} for j ≤ i.
    std::fill_n(t, int64_t(m) * m, 0.0f);
    std::fill_n(p, int64_t(m) * m, 0.0f);
    for (int i = 0; i < m; ++i) {
      const float* ki = k + int64_t(i) * dk;
      const float* qi = q + int64_t(i) * dk;
      float* ti = t + int64_t(i) * m;
      float* pi = p + int64_t(i) * m;
      ti[i] = 1.0f;
      for (int j = 0; j < i; ++j) {
        const float* kj = k + int64_t(j) * dk;
        const float decay = std::exp(gamma[i] - gamma[j]);
        const float aij = beta[i] * dot_f32(ki, kj, dk) * decay;
        const float* tj = t + int64_t(j) * m;
        for (int c = 0; c <= j; ++c) ti[c] -= aij * tj[c];
        pi[j] = dot_f32(qi, kj, dk) * decay;
      }
      pi[i] = dot_f32(qi, ki, dk);
    }
    // vb_j = β_j v_j and kb_j = −β_j e^{γ_j} k̂_j; U = T·vb, W = T·kb
    // (W negated: the next step adds it).
    std::vector<float*> y(size_t(std::max(2 * m, 8)));
    std::vector<const float*> coef(y.size());
    for (int j = 0; j < m; ++j) {
      const float* v = v_in(first + j);
      const float* kj = k + int64_t(j) * dk;
      float* vbj = vb + int64_t(j) * dv;
      float* kbj = kb + int64_t(j) * dk;
      const float neg = -beta[j] * std::exp(gamma[j]);
      for (int c = 0; c < dv; ++c) vbj[c] = beta[j] * v[c];
      for (int r = 0; r < dk; ++r) kbj[r] = neg * kj[r];
    }
    std::fill_n(u, int64_t(m) * dv, 0.0f);
    std::fill_n(w, int64_t(m) * dk, 0.0f);
    for (int i0 = 0; i0 < m; i0 += 4) {  // rows i0..i0+3 need T's columns up to their last row
      const int nb = std::min(4, m - i0), width = i0 + nb;
      for (int b = 0; b < nb; ++b) {
        y[size_t(b)] = u + int64_t(i0 + b) * dv;
        y[size_t(4 + b)] = w + int64_t(i0 + b) * dk;
        coef[size_t(b)] = coef[size_t(4 + b)] = t + int64_t(i0 + b) * m;
      }
      accumulate_rows(y.data(), coef.data(), nb, width, vb, dv, dv);
      accumulate_rows(y.data() + 4, coef.data() + 4, nb, width, kb, dk, dk);
    }
    // P's rows are done with q̂: it becomes e^{γ_i} q̂_i. Then, in one pass
    // over S for all rows, V' = U − W S and out_i = e^{γ_i} q̂_iᵀ S.
    for (int i = 0; i < m; ++i) scale_f32(q + int64_t(i) * dk, std::exp(gamma[i]), dk);
    for (int i = 0; i < m; ++i) {
      y[size_t(2 * i)] = u + int64_t(i) * dv;
      coef[size_t(2 * i)] = w + int64_t(i) * dk;
      y[size_t(2 * i + 1)] = out_row(first + i);
      coef[size_t(2 * i + 1)] = q + int64_t(i) * dk;
      std::fill_n(out_row(first + i), dv, 0.0f);
    }
    accumulate_rows(y.data(), coef.data(), 2 * m, dk, s, dv, dv);
    // The intra-chunk part: out_i += Σ_{j≤i} P_ij V'_j.
    for (int i0 = 0; i0 < m; i0 += 4) {
      const int nb = std::min(4, m - i0);
      for (int b = 0; b < nb; ++b) {
        y[size_t(b)] = out_row(first + i0 + b);
        coef[size_t(b)] = p + int64_t(i0 + b) * m;
      }
      accumulate_rows(y.data(), coef.data(), nb, i0 + nb, u, dv, dv);
    }
    // S ← e^{γ_m} S + Σ_j e^{γ_m−γ_j} k̂_j V'_jᵀ: row r of S gains
    // Σ_j kd[r][j] V'_j with kd[r][j] = e^{γ_m−γ_j} k̂_j[r].
    const float g_end = gamma[m - 1];
    for (int j = 0; j < m; ++j) {
      const float decay = std::exp(g_end - gamma[j]);
      for (int r = 0; r < dk; ++r) kd[int64_t(r) * m + j] = decay * k[int64_t(j) * dk + r];
    }
    scale_f32(s, std::exp(g_end), int64_t(dk) * dv);
    std::vector<float*> rows(static_cast<size_t>(dk));
    std::vector<const float*> kd_rows(static_cast<size_t>(dk));
    for (int r = 0; r < dk; ++r) {
      rows[size_t(r)] = s_row(r);
      kd_rows[size_t(r)] = kd + int64_t(r) * m;
    }
    accumulate_rows(rows.data(), kd_rows.data(), dk, m, u, dv, dv);
  }
};

}  // namespace

// One task per (sequence, value head), updating the head's dk × dv state in
// its slot. Rows go by chunks aligned to positions that are multiples of
// chunk_size, also cut at the sequence's splits and checkpoints; a piece of
// one row (a decode step) takes the recurrent form. A checkpoint copies the
// head's state, as it is after the rows before its position, to its slot.
void gated_delta_rule(const GatedDeltaRuleArgs& a) {
  const int dk = a.key_dim, dv = a.value_dim, heads = a.n_v_heads;
  const int chunk = std::max(a.chunk_size, 1);
  const int n_tasks = int(a.sequences.size()) * heads;
  ThreadPool::global().run(n_tasks, [&](int task) {
    const FlushDenormals flush;
    const ops::RecurrentSequence& seq = a.sequences[size_t(task / heads)];
    const int h = task % heads;
    float* s = a.state + (int64_t(seq.state_slot) * heads + h) * dk * dv;
    if (seq.starts) std::fill_n(s, int64_t(dk) * dv, 0.0f);
    thread_local ChunkScratch scratch;
    scratch.reserve(chunk, dk, dv);
    HeadTask t(a, h, s, scratch);
    size_t next_split = 0, next_checkpoint = 0;
    auto take_checkpoints = [&](int64_t position) {
      for (; next_checkpoint < seq.checkpoints.size() && seq.checkpoints[next_checkpoint].position == position;
           ++next_checkpoint) {
        float* copy = a.state + (int64_t(seq.checkpoints[next_checkpoint].slot) * heads + h) * dk * dv;
        std::copy_n(s, int64_t(dk) * dv, copy);
      }
    };
    take_checkpoints(seq.first_position);
    for (int32_t i = 0; i < seq.n_rows;) {
      const int64_t position = int64_t(seq.first_position) + i;
      int64_t end = std::min<int64_t>(seq.first_position + seq.n_rows, position + chunk - position % chunk);
      while (next_split < seq.splits.size() && seq.splits[next_split] <= position) ++next_split;
      if (next_split < seq.splits.size()) end = std::min<int64_t>(end, seq.splits[next_split]);
      if (next_checkpoint < seq.checkpoints.size())
        end = std::min<int64_t>(end, seq.checkpoints[next_checkpoint].position);
      const int m = int(end - position);
      if (m == 1) {
        t.recurrent_row(seq.first_row + i);
      } else {
        t.chunk_rows(seq.first_row + i, m);
      }
      i += m;
      take_checkpoints(end);
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
