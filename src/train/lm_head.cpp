#include "train/lm_head.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/device.h"
#include "ops/gather_rows.h"
#include "ops/linear_backward.h"
#include "ops/logp_head.h"
#include "ops/scaled_add.h"
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
  const int64_t n = int64_t(scored.size());
  const Device dev = hidden.device();
  rows_.resize(size_t(n));
  targets_.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i)
    rows_[size_t(i)] = scored[size_t(i)].row, targets_[size_t(i)] = scored[size_t(i)].target;
  if (n == 0) return {};
  gathered_ = ops::uninitialized(DType::F32, {n, hidden.dim(1)}, dev);
  ops::gather_rows(hidden, rows_, gathered_);
  lse_ = ops::uninitialized(DType::F32, {n}, dev);
  Tensor logp = ops::uninitialized(DType::F32, {n}, dev);
  ops::logp_head_forward({.hidden = gathered_, .weight = w_, .targets = targets_, .chunk = chunk_}, lse_, logp);
  const Tensor host = ops::to_device(logp, Device::CPU);  // the only [n] floats that cross
  return std::vector<float>(host.data_as<float>(), host.data_as<float>() + n);
}

void FusedLogpHead::backward(std::span<const float> d_logp, Tensor& d_hidden) {
  const int64_t n = int64_t(rows_.size());
  BRIOCHE_CHECK(int64_t(d_logp.size()) == n, "fused head: ", d_logp.size(), " gradients for ", n, " tokens");
  const Device dev = d_hidden.device();
  ops::fill(d_hidden, 0.0f);
  if (n > 0) {
    Tensor g_host = Tensor::zeros(DType::F32, {n});
    std::copy(d_logp.begin(), d_logp.end(), g_host.data_as<float>());
    const Tensor g = ops::to_device(g_host, dev);
    Tensor dg = ops::uninitialized(DType::F32, {n, gathered_.dim(1)}, dev);  // [n_scored, H]
    ops::logp_head_backward({.hidden = gathered_, .weight = w_, .targets = targets_, .chunk = chunk_}, lse_, g, dg,
                            ops::GradWrite::Overwrite);
    ops::scatter_add_rows(dg, rows_, d_hidden);
  }
  gathered_ = Tensor();
}

std::vector<float> PlainLogpHead::forward(const Tensor& hidden, std::span<const ScoredToken> scored) {
  BRIOCHE_CHECK(hidden.device() == Device::CPU && w_.device() == Device::CPU,
                "plain lm head (head_chunk_size 0, full logits) runs on the CPU only; use the fused head on CUDA");
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

SoftcapLogpHead::SoftcapLogpHead(const Tensor& w_out, float cap, int64_t chunk) : w_(w_out), cap_(cap), chunk_(chunk) {
  BRIOCHE_CHECK(cap > 0.0f, "soft-capped head: cap must be positive, got ", cap);
  BRIOCHE_CHECK(chunk > 0, "soft-capped head: chunk must be positive, got ", chunk);
}

Tensor SoftcapLogpHead::capped_chunk(int64_t v0, int64_t v1) {
  const int64_t n = gathered_.dim(0);
  if (!tile_.defined() || tile_.dim(1) < v1 - v0) tile_ = Tensor::zeros(DType::F32, {n, v1 - v0});
  Tensor z = tile_.slice(1, 0, v1 - v0);
  Tensor dense = Tensor::zeros(DType::F32, {n, v1 - v0});
  ops::matmul(gathered_, w_.slice(0, v0, v1), dense);
  for (int64_t i = 0; i < n; ++i) {
    const float* src = dense.row_as<float>(i);
    float* dst = z.row_as<float>(i);
    // transformers: logits / cap, tanh, · cap
    for (int64_t v = 0; v < v1 - v0; ++v) dst[v] = cap_ * std::tanh(src[v] / cap_);
  }
  return dense;  // the capped values are in tile_; the uncapped z is returned for the backward's slope
}

std::vector<float> SoftcapLogpHead::forward(const Tensor& hidden, std::span<const ScoredToken> scored) {
  BRIOCHE_CHECK(hidden.device() == Device::CPU && w_.device() == Device::CPU,
                "soft-capped lm head (Gemma) runs on the CPU only in this build");
  check_targets(w_, scored);
  scored_.assign(scored.begin(), scored.end());
  const int64_t n = int64_t(scored.size()), V = w_.dim(0);
  std::vector<float> logp(static_cast<size_t>(n));
  lse_.assign(size_t(n), 0.0);
  if (n == 0) return logp;
  gathered_ = gather_rows(hidden, scored);
  tile_ = Tensor();
  std::vector<double> mx(size_t(n), -std::numeric_limits<double>::infinity()), sum(size_t(n), 0.0),
      target(static_cast<size_t>(n));
  for (int64_t v0 = 0; v0 < V; v0 += chunk_) {
    const int64_t v1 = std::min(V, v0 + chunk_);
    capped_chunk(v0, v1);
    for (int64_t i = 0; i < n; ++i) {
      const float* z = tile_.row_as<float>(i);
      double m = mx[size_t(i)];
      for (int64_t v = 0; v < v1 - v0; ++v) m = std::max(m, double(z[v]));
      double s = sum[size_t(i)] * std::exp(mx[size_t(i)] - m);
      for (int64_t v = 0; v < v1 - v0; ++v) s += std::exp(double(z[v]) - m);
      mx[size_t(i)] = m, sum[size_t(i)] = s;
      const int32_t t = scored[size_t(i)].target;
      if (t >= v0 && t < v1) target[size_t(i)] = z[t - v0];
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    lse_[size_t(i)] = mx[size_t(i)] + std::log(sum[size_t(i)]);
    logp[size_t(i)] = float(target[size_t(i)] - lse_[size_t(i)]);
  }
  return logp;
}

void SoftcapLogpHead::backward(std::span<const float> d_logp, Tensor& d_hidden) {
  const int64_t n = int64_t(scored_.size()), V = w_.dim(0);
  BRIOCHE_CHECK(int64_t(d_logp.size()) == n, "soft-capped head: ", d_logp.size(), " gradients for ", n, " tokens");
  Tensor dg = Tensor::zeros(DType::F32, {std::max<int64_t>(n, 1), d_hidden.dim(1)}).slice(0, 0, n);
  for (int64_t v0 = 0; n > 0 && v0 < V; v0 += chunk_) {
    const int64_t v1 = std::min(V, v0 + chunk_);
    Tensor dz = capped_chunk(v0, v1);  // uncapped z, overwritten with dℓ/dz
    for (int64_t i = 0; i < n; ++i) {
      const float* capped = tile_.row_as<float>(i);
      float* d = dz.row_as<float>(i);
      const double g = d_logp[size_t(i)], lse = lse_[size_t(i)];
      const int32_t t = scored_[size_t(i)].target;
      for (int64_t v = 0; v < v1 - v0; ++v) {
        const double p = std::exp(double(capped[v]) - lse);
        const double th = capped[v] / cap_;  // tanh(z/c)
        d[v] = float(g * ((v0 + v == t ? 1.0 : 0.0) - p) * (1.0 - th * th));
      }
    }
    ops::matmul_input_grad(dz, w_.slice(0, v0, v1), dg, ops::GradWrite::Accumulate);
  }
  scatter_rows(dg, scored_, d_hidden);
  gathered_ = Tensor(), tile_ = Tensor();
}

}  // namespace brioche::train
