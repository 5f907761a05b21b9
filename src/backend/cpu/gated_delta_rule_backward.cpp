#include "backend/cpu/gated_delta_rule_backward.h"

#include "backend/cpu/gated_delta_rule_chunk_backward.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/vec_f32.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

namespace {

using detail::NormedKeys;

NormedKeys normalize(const GatedDeltaRuleBackwardArgs& a) {
  const int64_t n = a.n_rows, nk = a.n_k_heads, dk = a.key_dim, width = nk * dk;
  NormedKeys out{.q = std::vector<float>(size_t(n * width)),
                 .k = std::vector<float>(size_t(n * width)),
                 .rq = std::vector<float>(size_t(n * nk)),
                 .rk = std::vector<float>(size_t(n * nk))};
  const float q_scale = 1.0f / std::sqrt(float(dk));
  ThreadPool::global().parallel_for(n, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t h = 0; h < nk; ++h) {
        const float* q = a.q + r * a.q_stride + h * dk;
        const float* k = a.k + r * a.k_stride + h * dk;
        const float rq = 1.0f / std::sqrt(dot_f32(q, q, dk) + 1e-6f), rk = 1.0f / std::sqrt(dot_f32(k, k, dk) + 1e-6f);
        out.rq[size_t(r * nk + h)] = rq, out.rk[size_t(r * nk + h)] = rk;
        for (int64_t i = 0; i < dk; ++i) {
          out.q[size_t(r * width + h * dk + i)] = q[i] * rq * q_scale;
          out.k[size_t(r * width + h * dk + i)] = k[i] * rk;
        }
      }
  });
  return out;
}

// One (sequence, value head) in the recurrent form (the reference, and the
// form before the chunked one): the recurrence forward with checkpoints, then
// block by block backward. dq̂/dk̂ land in this value head's columns of
// dqh/dkh ([n_rows, n_v_heads·dk]); dv, dg, dβ in its columns of the outputs.
class HeadBackward {
 public:
  HeadBackward(const GatedDeltaRuleBackwardArgs& a, const NormedKeys& nk, int h, float* dqh, float* dkh)
      : a_(a),
        n_(nk),
        h_(h),
        kh_(h / (a.n_v_heads / a.n_k_heads)),
        dk_(a.key_dim),
        dv_(a.value_dim),
        dqh_(dqh),
        dkh_(dkh) {}

  void run(const ops::RecurrentSequence& seq) {
    const int64_t S = int64_t(dk_) * dv_, block = std::max(a_.checkpoint_rows, 1);
    const int64_t n_blocks = (seq.n_rows + block - 1) / block;
    // checkpoints[b]: the state before row first_row + b·block (S_{t−1} of that row).
    checkpoints_.assign(size_t(n_blocks * S), 0.0f);
    std::vector<float> state(size_t(S), 0.0f);
    const int64_t slot_offset = (int64_t(seq.state_slot) * a_.n_v_heads + h_) * S;
    if (!seq.starts && a_.initial_state != nullptr) std::copy_n(a_.initial_state + slot_offset, S, state.begin());
    for (int64_t i = 0; i < seq.n_rows; ++i) {
      if (i % block == 0) std::copy(state.begin(), state.end(), checkpoints_.begin() + (i / block) * S);
      step(seq.first_row + i, state.data(), state.data());
    }
    states_.assign(size_t((block + 1) * S), 0.0f);
    std::vector<float> dstate(size_t(S), 0.0f);
    if (a_.d_final_state != nullptr) std::copy_n(a_.d_final_state + slot_offset, S, dstate.begin());
    for (int64_t b = n_blocks - 1; b >= 0; --b) {
      const int64_t i0 = b * block, m = std::min<int64_t>(block, seq.n_rows - i0);
      std::copy_n(checkpoints_.begin() + b * S, S, states_.begin());
      for (int64_t i = 0; i < m; ++i)
        step(seq.first_row + i0 + i, &states_[size_t(i * S)], &states_[size_t((i + 1) * S)]);
      for (int64_t i = m - 1; i >= 0; --i)
        back(seq.first_row + i0 + i, &states_[size_t(i * S)], &states_[size_t((i + 1) * S)], dstate.data());
    }
    if (!seq.starts && a_.d_initial_state != nullptr)
      std::copy(dstate.begin(), dstate.end(), a_.d_initial_state + slot_offset);
  }

 private:
  const float* qhat(int64_t r) const { return &n_.q[size_t(r * a_.n_k_heads * dk_ + kh_ * dk_)]; }
  const float* khat(int64_t r) const { return &n_.k[size_t(r * a_.n_k_heads * dk_ + kh_ * dk_)]; }
  const float* value(int64_t r) const { return a_.v + r * a_.v_stride + int64_t(h_) * dv_; }
  float alpha(int64_t r) const { return std::exp(a_.g[r * a_.g_stride + h_]); }
  float beta(int64_t r) const { return a_.beta[r * a_.beta_stride + h_]; }

  // next = the state after row r from prev (the state before it); next may be prev.
  void step(int64_t r, const float* prev, float* next) {
    const float al = alpha(r), be = beta(r);
    const float* k = khat(r);
    const float* v = value(r);
    delta_.assign(size_t(dv_), 0.0f);
    for (int i = 0; i < dk_; ++i) axpy_f32(delta_.data(), al * k[i], prev + int64_t(i) * dv_, dv_);  // S'ᵀk̂
    for (int j = 0; j < dv_; ++j) delta_[size_t(j)] = be * (v[j] - delta_[size_t(j)]);
    for (int i = 0; i < dk_; ++i) {
      float* row = next + int64_t(i) * dv_;
      const float* p = prev + int64_t(i) * dv_;
      for (int j = 0; j < dv_; ++j) row[j] = al * p[j] + k[i] * delta_[size_t(j)];
    }
  }

  // The backward of row r (math in ops/gated_delta_rule_backward.h); prev = S_{r−1}, cur = S_r,
  // ds: dS_r in, dS_{r−1} out.
  void back(int64_t r, const float* prev, const float* cur, float* ds) {
    const float al = alpha(r), be = beta(r);
    const float* q = qhat(r);
    const float* k = khat(r);
    const float* v = value(r);
    const float* d_out = a_.dout + r * a_.dout_stride + int64_t(h_) * dv_;
    float* dq = dqh_ + r * int64_t(a_.n_v_heads) * dk_ + int64_t(h_) * dk_;
    float* dkk = dkh_ + r * int64_t(a_.n_v_heads) * dk_ + int64_t(h_) * dk_;
    float* dvv = a_.dv + r * a_.dv_stride + int64_t(h_) * dv_;
    // o = Sᵀq̂: dq̂ = S do, dS += q̂ doᵀ
    for (int i = 0; i < dk_; ++i) {
      dq[i] = dot_f32(cur + int64_t(i) * dv_, d_out, dv_);
      axpy_f32(ds + int64_t(i) * dv_, q[i], d_out, dv_);
    }
    // u = v − S'ᵀk̂ (S' = α·prev), δ = β·u
    u_.assign(size_t(dv_), 0.0f);
    for (int i = 0; i < dk_; ++i) axpy_f32(u_.data(), al * k[i], prev + int64_t(i) * dv_, dv_);
    for (int j = 0; j < dv_; ++j) u_[size_t(j)] = v[j] - u_[size_t(j)];
    // dδ = dSᵀk̂; dk̂ = dS·δ
    ddelta_.assign(size_t(dv_), 0.0f);
    for (int i = 0; i < dk_; ++i) {
      const float* row = ds + int64_t(i) * dv_;
      axpy_f32(ddelta_.data(), k[i], row, dv_);
      double sum = 0.0;
      for (int j = 0; j < dv_; ++j) sum += double(row[j]) * be * u_[size_t(j)];
      dkk[i] = float(sum);
    }
    double dbeta = 0.0;
    for (int j = 0; j < dv_; ++j) {
      dbeta += double(ddelta_[size_t(j)]) * u_[size_t(j)];
      dvv[j] = be * ddelta_[size_t(j)];
      ddelta_[size_t(j)] *= -be;  // e = d(S'ᵀk̂)
    }
    a_.dbeta[r * a_.dbeta_stride + h_] = float(dbeta);
    // dk̂ += S' e;  dS' = dS + k̂ eᵀ;  dg = ⟨dS', S'⟩;  dS_{r−1} = α dS'
    double dg = 0.0;
    for (int i = 0; i < dk_; ++i) {
      const float* p = prev + int64_t(i) * dv_;
      float* row = ds + int64_t(i) * dv_;
      dkk[i] += al * dot_f32(p, ddelta_.data(), dv_);
      axpy_f32(row, k[i], ddelta_.data(), dv_);
      dg += double(al) * dot_f32(row, p, dv_);
      scale_f32(row, al, dv_);
    }
    a_.dg[r * a_.dg_stride + h_] = float(dg);
  }

  const GatedDeltaRuleBackwardArgs& a_;
  const NormedKeys& n_;
  const int h_, kh_, dk_, dv_;
  float *dqh_, *dkh_;
  std::vector<float> checkpoints_, states_, delta_, u_, ddelta_;
};

}  // namespace

void gated_delta_rule_backward(const GatedDeltaRuleBackwardArgs& a) {
  const int64_t n = a.n_rows, nk = a.n_k_heads, nv = a.n_v_heads, dk = a.key_dim;
  const NormedKeys normed = normalize(a);
  std::vector<float> dqh(size_t(n * nv * dk), 0.0f), dkh(size_t(n * nv * dk), 0.0f);  // d q̂, d k̂ per value head
  const int n_tasks = int(a.sequences.size() * size_t(nv));
  ThreadPool::global().run(n_tasks, [&](int task) {
    const FlushDenormals flush;
    const ops::RecurrentSequence& seq = a.sequences[size_t(task / nv)];
    if (a.chunk_size > 1) {
      detail::chunked_head_backward(a, normed, int(task % nv), seq, dqh.data(), dkh.data());
    } else {
      HeadBackward head(a, normed, int(task % nv), dqh.data(), dkh.data());
      head.run(seq);
    }
  });
  // Σ over the value heads of each key head, then through q̂ = l2norm(q)/√dk
  // and k̂ = l2norm(k), for the sequences' rows (the others are left as they are).
  std::vector<uint8_t> in_sequence(size_t(n), 0);
  for (const ops::RecurrentSequence& s : a.sequences) std::fill_n(in_sequence.begin() + s.first_row, s.n_rows, 1);
  const int64_t group = nv / nk;
  const float q_scale = 1.0f / std::sqrt(float(dk));
  ThreadPool::global().parallel_for(n, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> dy(static_cast<size_t>(dk));
    for (int64_t r = r0; r < r1; ++r) {
      if (!in_sequence[size_t(r)]) continue;
      for (int64_t h = 0; h < nk; ++h)
        for (int which = 0; which < 2; ++which) {
          const std::vector<float>& d_hat = which == 0 ? dqh : dkh;
          std::fill(dy.begin(), dy.end(), 0.0f);
          for (int64_t j = 0; j < group; ++j)
            axpy_f32(dy.data(), which == 0 ? q_scale : 1.0f, &d_hat[size_t((r * nv + h * group + j) * dk)], dk);
          const float* x = which == 0 ? a.q + r * a.q_stride + h * dk : a.k + r * a.k_stride + h * dk;
          float* dx = which == 0 ? a.dq + r * a.dq_stride + h * dk : a.dk + r * a.dk_stride + h * dk;
          const float rn = which == 0 ? normed.rq[size_t(r * nk + h)] : normed.rk[size_t(r * nk + h)];
          const float c = rn * rn * rn * dot_f32(x, dy.data(), dk);
          for (int64_t i = 0; i < dk; ++i) dx[i] = rn * dy[size_t(i)] - x[i] * c;
        }
    }
  });
}

void delta_rule_gates_backward(const DeltaRuleGatesBackwardArgs& a) {
  for (int64_t r = 0; r < a.n_rows; ++r) {
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const float x = a.a[r * a.a_stride + h] + a.dt_bias[h];
      // d softplus(x)/dx = σ(x) (torch's threshold 20 returns x, slope 1: σ(20) = 1 in f32)
      const float sig = 1.0f / (1.0f + std::exp(-x));
      a.da[r * a.da_stride + h] = a.dg[r * a.dg_stride + h] * -std::exp(a.a_log[h]) * sig;
      const float beta = 1.0f / (1.0f + std::exp(-a.b[r * a.b_stride + h]));
      a.db[r * a.db_stride + h] = a.dbeta[r * a.dbeta_stride + h] * beta * (1.0f - beta);
    }
  }
}

}  // namespace brioche::backend::cpu
