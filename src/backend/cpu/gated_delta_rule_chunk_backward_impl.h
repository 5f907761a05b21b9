// The chunked backward of the gated delta rule for one (sequence, value
// head), as a template over the ISA of its small products: included by
// gated_delta_rule_chunk_backward.cpp (AVX2) and _avx512.cpp (AVX-512), each
// before any target pragma, so this code and the standard library's stay at
// the baseline ISA and only the products differ.
//
// The gated delta rule's backward in the chunked form (the WY / UT form of
// the forward, backend/cpu/gated_delta_rule.cpp). For a chunk of m rows with
// q̂_i, k̂_i (normed), v_i, β_i, the cumulative log decay γ_i = Σ_{j≤i} g_j,
// Γ_ij = e^{γ_i−γ_j} (j ≤ i, else 0), γ_e = γ_{m−1} and S the state before it:
//   A  = β ⊙ (K̂K̂ᵀ ⊙ Γ) strictly below the diagonal,  T = (I + A)⁻¹
//   U  = T·diag(β)·V,   W = T·Kb with Kb_j = β_j e^{γ_j} k̂_j
//   V' = U − W·S                              (the chunk's deltas once S is read)
//   O  = Qg·S + P·V'                          Qg_i = e^{γ_i} q̂_i,  P = (Q̂K̂ᵀ) ⊙ Γ
//   S⁺ = e^{γ_e}·S + Kdᵀ·V'                   Kd_j = e^{γ_e−γ_j} k̂_j
// Backward, given dO and dS⁺ (the gradient of the state after the chunk):
//   dV' = Pᵀ·dO + Kd·dS⁺;        dKd = V'·dS⁺ᵀ;    dP = dO·V'ᵀ
//   dQg = dO·Sᵀ;   dW = −dV'·Sᵀ;  dS = e^{γ_e}·dS⁺ + Qgᵀ·dO − Wᵀ·dV'
//   dT  = dV'·(β ⊙ V)ᵀ + dW·Kbᵀ;  dA = −Tᵀ·dT·Tᵀ (strictly lower)
//   d(βV) = Tᵀ·dV';  dKb = Tᵀ·dW
// then the chain through A, P, Qg, Kd, Kb, the e^{γ_e} decay of S and
// γ = cumsum(g) (dg_l = Σ_{i≥l} dγ_i) into dq̂, dk̂, dv, dβ, dg.
//
// A task first runs the chunks forward from its initial state, keeping the
// state before each chunk (dk·dv floats per chunk) and V' (dv per row), then
// walks the chunks backward. The products against S, dS⁺ (dk × dv) are the
// work, ~7·m·dk·dv multiply-adds a chunk, as register-blocked small GEMMs
// (backend/cpu/delta_rule_gemm.h); the m × m algebra is scalar.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/cpu/gated_delta_rule_chunk_backward.h"
#include "backend/cpu/vec_f32.h"

namespace brioche::backend::cpu::detail {

// Growable per-thread buffers (a task allocates nothing once they fit).
struct ChunkScratch {
  std::vector<float> states, vprime, chunk;
  static float* fit(std::vector<float>& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};

// Gemm: the small products (accumulate_rows, dot_rows of delta_rule_gemm.h) for one ISA.
template <class Gemm>
class ChunkedBackward {
 public:
  ChunkedBackward(const GatedDeltaRuleBackwardArgs& a, const NormedKeys& nk, int h, float* dqh, float* dkh)
      : a_(a),
        h_(h),
        dk_(a.key_dim),
        dv_(a.value_dim),
        qk_stride_(int64_t(a.n_k_heads) * a.key_dim),
        dh_stride_(int64_t(a.n_v_heads) * a.key_dim),
        qhat_(nk.q.data() + int64_t(h / (a.n_v_heads / a.n_k_heads)) * a.key_dim),
        khat_(nk.k.data() + int64_t(h / (a.n_v_heads / a.n_k_heads)) * a.key_dim),
        dqh_(dqh + int64_t(h) * a.key_dim),
        dkh_(dkh + int64_t(h) * a.key_dim) {}

  void run(const ops::RecurrentSequence& seq) {
    const int64_t S = int64_t(dk_) * dv_;
    const int C = std::max(a_.chunk_size, 1);
    // The pieces: chunks on the position grid of the forward, also cut at the sequence's splits.
    std::vector<std::pair<int64_t, int>> pieces;  // (first row, rows)
    size_t next_split = 0;
    for (int64_t i = 0; i < seq.n_rows;) {
      const int64_t position = int64_t(seq.first_position) + i;
      int64_t end = std::min<int64_t>(int64_t(seq.first_position) + seq.n_rows, position + C - position % C);
      while (next_split < seq.splits.size() && seq.splits[next_split] <= position) ++next_split;
      if (next_split < seq.splits.size()) end = std::min<int64_t>(end, seq.splits[next_split]);
      pieces.emplace_back(seq.first_row + i, int(end - position));
      i += end - position;
    }
    int max_m = 1;
    for (const auto& p : pieces) max_m = std::max(max_m, p.second);
    thread_local ChunkScratch scratch;
    float* states = ChunkScratch::fit(scratch.states, size_t(int64_t(pieces.size() + 1) * S));
    vprime_ = ChunkScratch::fit(scratch.vprime, size_t(int64_t(seq.n_rows) * dv_));
    layout(max_m, ChunkScratch::fit(scratch.chunk, chunk_floats(max_m)));
    const int64_t slot_offset = (int64_t(seq.state_slot) * a_.n_v_heads + h_) * S;

    float* s = states;  // the state before piece p lives at states + p·S
    if (seq.starts || a_.initial_state == nullptr)
      std::fill_n(s, S, 0.0f);
    else
      std::copy_n(a_.initial_state + slot_offset, S, s);
    for (size_t p = 0; p < pieces.size(); ++p) {
      std::copy_n(states + int64_t(p) * S, S, states + int64_t(p + 1) * S);
      forward_piece(pieces[p].first, pieces[p].second, vprime_ + (pieces[p].first - seq.first_row) * dv_,
                    states + int64_t(p + 1) * S);
    }
    float* ds = states + int64_t(pieces.size()) * S;  // the last state is not needed: it becomes dS
    if (a_.d_final_state != nullptr)
      std::copy_n(a_.d_final_state + slot_offset, S, ds);
    else
      std::fill_n(ds, S, 0.0f);
    for (size_t p = pieces.size(); p-- > 0;)
      backward_piece(pieces[p].first, pieces[p].second, vprime_ + (pieces[p].first - seq.first_row) * dv_,
                     states + int64_t(p) * S, ds);
    if (!seq.starts && a_.d_initial_state != nullptr) std::copy_n(ds, S, a_.d_initial_state + slot_offset);
  }

 private:
  const float* qhat(int64_t r) const { return qhat_ + r * qk_stride_; }
  const float* khat(int64_t r) const { return khat_ + r * qk_stride_; }
  const float* value(int64_t r) const { return a_.v + r * a_.v_stride + int64_t(h_) * dv_; }

  // Scratch of one chunk of up to M rows.
  size_t chunk_floats(int M) const {
    const size_t m = size_t(M), dk = size_t(dk_), dv = size_t(dv_);
    return 5 * m + 11 * m * m + 9 * m * dk + 4 * m * dv + dk * 2 * m;
  }
  void layout(int M, float* p) {
    const int64_t m = M, mm = m * m, md = m * dk_, mv = m * dv_;
    for (float** v : {&gam_, &eg_, &beta_, &dgam_, &dbeta_}) *v = p, p += m;
    for (float** v : {&kk_, &t_, &tt_, &qk_, &pt_, &dp_, &dt_, &x_, &da_, &coef_, &decay_}) *v = p, p += mm;
    for (float** v : {&kb_, &w_, &qg_, &kd_, &dkd_, &dkb_}) *v = p, p += md;
    dqw_ = p, p += 2 * md;  // [dQg; dW]
    wn_ = p, p += md;
    ob_ = p, p += 2 * mv;  // [dO; −dV'], or U in the forward
    dvp_ = p, p += mv;
    dvb_ = p, p += mv;
    coef_t_ = p;  // [dk, 2m]
  }

  // γ, e^γ, β, Γ, K̂K̂ᵀ, T = (I + A)⁻¹ (forward substitution: row i of T is
  // e_i − Σ_{j<i} A_ij T_j), Kb and W = T·Kb for the m rows from r0.
  void prepare(int64_t r0, int m) {
    float g_sum = 0.0f;
    for (int i = 0; i < m; ++i) {
      g_sum += a_.g[(r0 + i) * a_.g_stride + h_];
      gam_[i] = g_sum;
      eg_[i] = std::exp(g_sum);
      beta_[i] = a_.beta[(r0 + i) * a_.beta_stride + h_];
    }
    for (int i = 0; i < m; ++i)
      for (int j = 0; j <= i; ++j) decay_[i * m + j] = std::exp(gam_[i] - gam_[j]);
    Gemm::dot_rows(khat(r0), qk_stride_, m, khat(r0), qk_stride_, m, dk_, kk_, m);
    std::fill_n(t_, int64_t(m) * m, 0.0f);
    for (int i = 0; i < m; ++i) {
      float* ti = t_ + int64_t(i) * m;
      ti[i] = 1.0f;
      for (int j = 0; j < i; ++j) {
        const float aij = beta_[i] * kk_[i * m + j] * decay_[i * m + j];
        const float* tj = t_ + int64_t(j) * m;
        for (int c = 0; c <= j; ++c) ti[c] -= aij * tj[c];
      }
    }
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) tt_[j * m + i] = t_[i * m + j];
    for (int j = 0; j < m; ++j) {
      const float* k = khat(r0 + j);
      float* kb = kb_ + int64_t(j) * dk_;
      const float c = beta_[j] * eg_[j];
      for (int r = 0; r < dk_; ++r) kb[r] = c * k[r];
    }
    std::fill_n(w_, int64_t(m) * dk_, 0.0f);
    rows_times(w_, dk_, t_, m, m, kb_, dk_, dk_);
  }

  // y_i += Σ_k coef[i·ldc + k] · x[k·ldx ..] for i < n_rows (rows of n floats at stride ldy).
  void rows_times(float* y, int64_t ldy, const float* coef, int64_t ldc, int n_rows, const float* x, int64_t ldx, int n,
                  int K = -1) {
    float* ys[64];
    const float* cs[64];
    for (int i0 = 0; i0 < n_rows; i0 += 64) {
      const int nb = std::min(64, n_rows - i0);
      for (int b = 0; b < nb; ++b) ys[b] = y + (i0 + b) * ldy, cs[b] = coef + (i0 + b) * ldc;
      Gemm::accumulate_rows(ys, cs, nb, K < 0 ? int(ldc) : K, x, ldx, n);
    }
  }

  // The chunk's V' (into vp, [m, dv]) and the state after it (s: before in, after out).
  void forward_piece(int64_t r0, int m, float* vp, float* s) {
    prepare(r0, m);
    for (int j = 0; j < m; ++j) {  // β_j v_j
      const float* v = value(r0 + j);
      for (int c = 0; c < dv_; ++c) ob_[j * dv_ + c] = beta_[j] * v[c];
    }
    std::fill_n(vp, int64_t(m) * dv_, 0.0f);
    rows_times(vp, dv_, t_, m, m, ob_, dv_, dv_);  // U = T·(βV)
    for (int64_t i = 0; i < int64_t(m) * dk_; ++i) wn_[i] = -w_[i];
    rows_times(vp, dv_, wn_, dk_, m, s, dv_, dv_);  // V' = U − W·S
    const float ge = gam_[m - 1];
    for (int j = 0; j < m; ++j) {  // Kdᵀ: [dk, m]
      const float decay = std::exp(ge - gam_[j]);
      const float* k = khat(r0 + j);
      for (int r = 0; r < dk_; ++r) coef_t_[int64_t(r) * m + j] = decay * k[r];
    }
    scale_f32(s, eg_[m - 1], int64_t(dk_) * dv_);
    rows_times(s, dv_, coef_t_, m, dk_, vp, dv_, dv_);  // S⁺ = e^{γ_e}·S + Kdᵀ·V'
  }

  // The chunk's gradients from dO (a_.dout) and dS⁺ (ds, replaced by dS); s: the state before it.
  void backward_piece(int64_t r0, int m, const float* vp, const float* s, float* ds) {
    prepare(r0, m);
    const int64_t md = int64_t(m) * dk_;
    const float ge = gam_[m - 1], ege = eg_[m - 1];
    for (int i = 0; i < m; ++i) {
      const float* q = qhat(r0 + i);
      const float* k = khat(r0 + i);
      const float decay = std::exp(ge - gam_[i]);
      for (int r = 0; r < dk_; ++r) {
        qg_[i * dk_ + r] = eg_[i] * q[r];
        kd_[i * dk_ + r] = decay * k[r];
      }
      std::copy_n(a_.dout + (r0 + i) * a_.dout_stride + int64_t(h_) * dv_, dv_, ob_ + int64_t(i) * dv_);
    }
    // P = (Q̂K̂ᵀ) ⊙ Γ, kept as Pᵀ for dV' = Pᵀ·dO.
    Gemm::dot_rows(qhat(r0), qk_stride_, m, khat(r0), qk_stride_, m, dk_, qk_, m);
    std::fill_n(pt_, int64_t(m) * m, 0.0f);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j <= i; ++j) pt_[j * m + i] = qk_[i * m + j] * decay_[i * m + j];
    // dV' = Pᵀ·dO + Kd·dS⁺;  dKd = V'·dS⁺ᵀ;  ⟨S, dS⁺⟩ for the decay of S
    std::fill_n(dvp_, int64_t(m) * dv_, 0.0f);
    rows_times(dvp_, dv_, pt_, m, m, ob_, dv_, dv_);
    rows_times(dvp_, dv_, kd_, dk_, m, ds, dv_, dv_);
    Gemm::dot_rows(vp, dv_, m, ds, dv_, dk_, dv_, dkd_, dk_);
    const float s_ds = dot_f32(s, ds, int64_t(dk_) * dv_);
    // [dQg; dW] = [dO; −dV']·Sᵀ;  dP = dO·V'ᵀ
    for (int64_t i = 0; i < int64_t(m) * dv_; ++i) ob_[int64_t(m) * dv_ + i] = -dvp_[i];
    Gemm::dot_rows(ob_, dv_, 2 * m, s, dv_, dk_, dv_, dqw_, dk_);
    Gemm::dot_rows(ob_, dv_, m, vp, dv_, m, dv_, dp_, m);
    const float* dw = dqw_ + md;
    // dS = e^{γ_e}·dS⁺ + [Qg; W]ᵀ·[dO; −dV']
    for (int i = 0; i < m; ++i)
      for (int r = 0; r < dk_; ++r) {
        coef_t_[int64_t(r) * 2 * m + i] = qg_[i * dk_ + r];
        coef_t_[int64_t(r) * 2 * m + m + i] = w_[i * dk_ + r];
      }
    scale_f32(ds, ege, int64_t(dk_) * dv_);
    rows_times(ds, dv_, coef_t_, 2 * m, dk_, ob_, dv_, dv_);
    // dT = dV'·(βV)ᵀ + dW·Kbᵀ (the lower triangle is read)
    Gemm::dot_rows(dvp_, dv_, m, value(r0), a_.v_stride, m, dv_, dt_, m);
    Gemm::dot_rows(dw, dk_, m, kb_, dk_, m, dk_, x_, m);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) dt_[i * m + j] = beta_[j] * dt_[i * m + j] + x_[i * m + j];
    // d(βV) = Tᵀ·dV';  dKb = Tᵀ·dW
    std::fill_n(dvb_, int64_t(m) * dv_, 0.0f);
    rows_times(dvb_, dv_, tt_, m, m, dvp_, dv_, dv_);
    std::fill_n(dkb_, md, 0.0f);
    rows_times(dkb_, dk_, tt_, m, m, dw, dk_, dk_);
    // dA = −Tᵀ·dT·Tᵀ: X = dT·Tᵀ (T lower, so dT's lower triangle), dA = −Tᵀ·X.
    for (int i = 0; i < m; ++i)
      for (int l = 0; l < m; ++l) {
        float sum = 0.0f;
        for (int j = 0; j <= std::min(i, l); ++j) sum += dt_[i * m + j] * t_[l * m + j];
        x_[i * m + l] = sum;
      }
    for (int k = 0; k < m; ++k)
      for (int l = 0; l < k; ++l) {
        float sum = 0.0f;
        for (int i = k; i < m; ++i) sum += t_[i * m + k] * x_[i * m + l];
        da_[k * m + l] = -sum;
      }

    // The scalar chain.  A_ij = β_i KK_ij Γ_ij;  P_ij = QK_ij Γ_ij.
    std::fill_n(dgam_, m, 0.0f);
    for (int i = 0; i < m; ++i) {
      const float* v = value(r0 + i);
      const float* k = khat(r0 + i);
      dbeta_[i] = dot_f32(v, dvb_ + int64_t(i) * dv_, dv_) + eg_[i] * dot_f32(k, dkb_ + int64_t(i) * dk_, dk_);
      float* dvo = a_.dv + (r0 + i) * a_.dv_stride + int64_t(h_) * dv_;
      for (int c = 0; c < dv_; ++c) dvo[c] = beta_[i] * dvb_[i * dv_ + c];
      dgam_[i] += dot_f32(qg_ + int64_t(i) * dk_, dqw_ + int64_t(i) * dk_, dk_);
      const float kd_dkd = dot_f32(kd_ + int64_t(i) * dk_, dkd_ + int64_t(i) * dk_, dk_);
      dgam_[m - 1] += kd_dkd;
      dgam_[i] -= kd_dkd;
      dgam_[i] += dot_f32(kb_ + int64_t(i) * dk_, dkb_ + int64_t(i) * dk_, dk_);
    }
    dgam_[m - 1] += ege * s_ds;
    // coef_ = (E + Eᵀ) with E_ij = β_i dA_ij Γ_ij (i > j): d(K̂K̂ᵀ) through A.
    // qk_ becomes G = dP ⊙ Γ (j ≤ i): dq̂ += G·K̂, dk̂ += Gᵀ·Q̂; tt_ becomes Gᵀ.
    std::fill_n(coef_, int64_t(m) * m, 0.0f);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j <= i; ++j) {
        const float decay = decay_[i * m + j];
        const float gij = dp_[i * m + j] * decay;
        if (j < i) {
          const float mij = da_[i * m + j] * decay;
          const float t = mij * beta_[i] * kk_[i * m + j];  // dA_ij·A_ij
          dbeta_[i] += mij * kk_[i * m + j];
          dgam_[i] += t, dgam_[j] -= t;
          const float pij = gij * qk_[i * m + j];  // dP_ij·P_ij
          dgam_[i] += pij, dgam_[j] -= pij;
          coef_[i * m + j] += beta_[i] * mij;
          coef_[j * m + i] += beta_[i] * mij;
        }
        x_[i * m + j] = gij;
      }
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) {
        qk_[i * m + j] = j <= i ? x_[i * m + j] : 0.0f;
        tt_[j * m + i] = qk_[i * m + j];
      }
    for (int i = 0; i < m; ++i) {
      float* dq = dqh_ + (r0 + i) * dh_stride_;
      float* dk = dkh_ + (r0 + i) * dh_stride_;
      const float decay = std::exp(ge - gam_[i]), kb_scale = beta_[i] * eg_[i];
      for (int r = 0; r < dk_; ++r) {
        dq[r] = eg_[i] * dqw_[i * dk_ + r];
        dk[r] = decay * dkd_[i * dk_ + r] + kb_scale * dkb_[i * dk_ + r];
      }
    }
    rows_times(dqh_ + r0 * dh_stride_, dh_stride_, qk_, m, m, khat(r0), qk_stride_, dk_);
    rows_times(dkh_ + r0 * dh_stride_, dh_stride_, tt_, m, m, qhat(r0), qk_stride_, dk_);
    rows_times(dkh_ + r0 * dh_stride_, dh_stride_, coef_, m, m, khat(r0), qk_stride_, dk_);
    // γ = cumsum(g): dg_l = Σ_{i≥l} dγ_i
    float acc = 0.0f;
    for (int i = m - 1; i >= 0; --i) {
      acc += dgam_[i];
      a_.dg[(r0 + i) * a_.dg_stride + h_] = acc;
      a_.dbeta[(r0 + i) * a_.dbeta_stride + h_] = dbeta_[i];
    }
  }

  const GatedDeltaRuleBackwardArgs& a_;
  const int h_, dk_, dv_;
  const int64_t qk_stride_, dh_stride_;
  const float *qhat_, *khat_;
  float *dqh_, *dkh_;
  float* vprime_ = nullptr;
  float *gam_, *eg_, *beta_, *dgam_, *dbeta_;
  float *kk_, *t_, *tt_, *qk_, *pt_, *dp_, *dt_, *x_, *da_, *coef_, *decay_;  // decay_: Γ (lower triangle)
  float *kb_, *w_, *qg_, *kd_, *dkd_, *dkb_, *dqw_, *wn_, *ob_, *dvp_, *dvb_, *coef_t_;
};

}  // namespace brioche::backend::cpu::detail
