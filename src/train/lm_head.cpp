#include "train/lm_head.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/linear_backward.h"
#include "ops/matmul.h"

namespace brioche::train {

namespace {

Tensor gather_rows(const Tensor& hidden, std::span<const ScoredToken> scored) {
  Tensor g = Tensor::zeros(DType::F32, {int64_t(scored.size()), hidden.dim(1)});
  for (size_t i = 0; i < scored.size(); ++i) {
    BRIOCHE_CHECK(scored[i].row >= 0 && scored[i].row < hidden.dim(0), "lm head: scored row ", scored[i].row,
                  " outside ", hidden.dim(0), " rows");
    std::memcpy(g.row_ptr(int64_t(i)), hidden.row_ptr(scored[i].row), size_t(hidden.dim(1)) * 4);
  }
  return g;
}

void scatter_rows(const Tensor& d_gathered, std::span<const ScoredToken> scored, Tensor& d_hidden) {
  for (int64_t r = 0; r < d_hidden.dim(0); ++r) std::memset(d_hidden.row_ptr(r), 0, size_t(d_hidden.dim(1)) * 4);
  for (size_t i = 0; i < scored.size(); ++i) {
    const float* src = d_gathered.row_as<float>(int64_t(i));
    float* dst = d_hidden.row_as<float>(scored[i].row);
    for (int64_t c = 0; c < d_hidden.dim(1); ++c) dst[c] += src[c];
  }
}

void check_targets(const Tensor& w, std::span<const ScoredToken> scored) {
  for (const auto& s : scored) {
    BRIOCHE_CHECK(s.target >= 0 && s.target < w.dim(0), "lm head: target token ", s.target, " outside vocab ",
                  w.dim(0));
  }
}

}  // namespace

FusedLogpHead::FusedLogpHead(const Tensor& w_out, int64_t chunk) : w_(w_out), chunk_(chunk) {
  BRIOCHE_CHECK(chunk > 0, "fused head: chunk must be positive, got ", chunk);
}

std::vector<float> FusedLogpHead::forward(const Tensor& hidden, std::span<const ScoredToken> scored) {
  check_targets(w_, scored);
  scored_.assign(scored.begin(), scored.end());
  gathered_ = gather_rows(hidden, scored);
  const int64_t n = int64_t(scored.size()), V = w_.dim(0);
  std::vector<float> m(size_t(n), -std::numeric_limits<float>::infinity()), s(size_t(n), 0.0f), z_t(size_t(n), 0.0f);
  if (n == 0) return {};
  Tensor logits = Tensor::zeros(DType::F32, {n, std::min(chunk_, V)});  // [n, chunk]
  for (int64_t v0 = 0; v0 < V; v0 += chunk_) {
    const int64_t v1 = std::min(V, v0 + chunk_);
    Tensor z = logits.slice(1, 0, v1 - v0);
    ops::matmul(gathered_, w_.slice(0, v0, v1), z);
    ThreadPool::global().parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float* zi = z.row_as<float>(i);
        float mc = -std::numeric_limits<float>::infinity();
        for (int64_t v = 0; v < v1 - v0; ++v) mc = std::max(mc, zi[v]);
        const float m_new = std::max(m[size_t(i)], mc);
        float sum = 0.0f;
        for (int64_t v = 0; v < v1 - v0; ++v) sum += std::exp(zi[v] - m_new);
        s[size_t(i)] = s[size_t(i)] * std::exp(m[size_t(i)] - m_new) + sum;
        m[size_t(i)] = m_new;
        const int32_t t = scored_[size_t(i)].target;
        if (t >= v0 && t < v1) z_t[size_t(i)] = zi[t - v0];
      }
    });
  }
  lse_.resize(size_t(n));
  std::vector<float> logp(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    lse_[size_t(i)] = m[size_t(i)] + std::log(s[size_t(i)]);
    logp[size_t(i)] = z_t[size_t(i)] - lse_[size_t(i)];
  }
  return logp;
}

void FusedLogpHead::backward(std::span<const float> d_logp, Tensor& d_hidden) {
  const int64_t n = int64_t(scored_.size()), V = w_.dim(0), H = gathered_.dim(1);
  BRIOCHE_CHECK(int64_t(d_logp.size()) == n, "fused head: ", d_logp.size(), " gradients for ", n, " tokens");
  Tensor dg = Tensor::zeros(DType::F32, {n, H});  // [n_scored, H]
  if (n > 0) {
    Tensor logits = Tensor::zeros(DType::F32, {n, std::min(chunk_, V)});
    for (int64_t v0 = 0; v0 < V; v0 += chunk_) {
      const int64_t v1 = std::min(V, v0 + chunk_);
      Tensor z = logits.slice(1, 0, v1 - v0);
      Tensor w_chunk = w_.slice(0, v0, v1);
      ops::matmul(gathered_, w_chunk, z);
      // dz_v = d_logp · (1[v = t] − e^{z_v − lse}), in place over the logits
      ThreadPool::global().parallel_for(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          float* zi = z.row_as<float>(i);
          const float g = d_logp[size_t(i)], lse = lse_[size_t(i)];
          for (int64_t v = 0; v < v1 - v0; ++v) zi[v] = -g * std::exp(zi[v] - lse);
          const int32_t t = scored_[size_t(i)].target;
          if (t >= v0 && t < v1) zi[t - v0] += g;
        }
      });
      ops::matmul_input_grad(z, w_chunk, dg, ops::GradWrite::Accumulate);
    }
  }
  scatter_rows(dg, scored_, d_hidden);
}

std::vector<float> PlainLogpHead::forward(const Tensor& hidden, std::span<const ScoredToken> scored) {
  check_targets(w_, scored);
  scored_.assign(scored.begin(), scored.end());
  gathered_ = gather_rows(hidden, scored);
  const int64_t n = int64_t(scored.size()), V = w_.dim(0);
  std::vector<float> logp(static_cast<size_t>(n));
  if (n == 0) return logp;
  probs_ = Tensor::zeros(DType::F32, {n, V});
  ops::matmul(gathered_, w_, probs_);
  for (int64_t i = 0; i < n; ++i) {
    float* z = probs_.row_as<float>(i);
    double mx = -std::numeric_limits<double>::infinity(), sum = 0.0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(z[v]));
    for (int64_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - mx);
    const double lse = mx + std::log(sum);
    logp[size_t(i)] = float(double(z[scored[size_t(i)].target]) - lse);
    for (int64_t v = 0; v < V; ++v) z[v] = float(std::exp(double(z[v]) - lse));
  }
  return logp;
}

void PlainLogpHead::backward(std::span<const float> d_logp, Tensor& d_hidden) {
  const int64_t n = int64_t(scored_.size()), V = w_.dim(0);
  Tensor dz = Tensor::zeros(DType::F32, {n, V});
  for (int64_t i = 0; i < n; ++i) {
    const float* p = probs_.row_as<float>(i);
    float* d = dz.row_as<float>(i);
    for (int64_t v = 0; v < V; ++v) d[v] = -d_logp[size_t(i)] * p[v];
    d[scored_[size_t(i)].target] += d_logp[size_t(i)];
  }
  Tensor dg = Tensor::zeros(DType::F32, {n, gathered_.dim(1)});
  if (n > 0) ops::matmul_input_grad(dz, w_, dg, ops::GradWrite::Overwrite);
  scatter_rows(dg, scored_, d_hidden);
}

}  // namespace brioche::train
