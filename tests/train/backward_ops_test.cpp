// Finite-difference checks, in f64, of every backward op: each test writes
// the forward in double precision, perturbs inputs by ±h and compares the
// central difference of a random linear functional L = Σ c ⊙ y with the f32
// analytic backward.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <tuple>
#include <vector>

#include "backend/cpu/amx_gemm.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/linear_backward.h"
#include "ops/attention_backward.h"
#include "ops/causal_conv1d_backward.h"
#include "ops/gated_delta_rule_backward.h"
#include "ops/layer_backward.h"
#include "ops/linear_backward.h"
#include "ops/quantize.h"
#include "ops/rope.h"
#include "ops/sigmoid_gate.h"

namespace brioche::ops {
namespace {

using Vec = std::vector<double>;

Vec random_vec(size_t n, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> d(0.0, scale);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Tensor to_tensor(const Vec& v, int64_t rows, int64_t cols) {
  Tensor t = Tensor::zeros(DType::F32, {rows, cols});
  for (size_t i = 0; i < v.size(); ++i) t.data_as<float>()[i] = float(v[i]);
  return t;
}

Vec to_vec(const Tensor& t) {
  Vec v(size_t(t.numel()));
  for (int64_t r = 0; r < t.dim(0); ++r)
    for (int64_t c = 0; c < t.dim(1); ++c) v[size_t(r * t.dim(1) + c)] = t.row_as<float>(r)[c];
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic d(c·f(x))/dx against central differences of the f64 forward.
void expect_grad_matches(const std::function<Vec(const Vec&)>& forward, Vec x, const Vec& cot, const Vec& analytic,
                         double tol, const char* what) {
  const double h = 1e-5;
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double orig = x[i];
    x[i] = orig + h;
    const double up = dot(cot, forward(x));
    x[i] = orig - h;
    const double down = dot(cot, forward(x));
    x[i] = orig;
    const double fd = (up - down) / (2 * h);
    max_err = std::max(max_err, std::abs(fd - analytic[i]));
    max_ref = std::max(max_ref, std::abs(fd));
  }
  EXPECT_LT(max_err, tol * std::max(1.0, max_ref))
      << what << ": max |fd - analytic| " << max_err << " (max |fd| " << max_ref << ")";
}

TEST(BackwardOps, MatmulInputAndWeightGrad) {
  std::mt19937 rng(1);
  const int64_t n = 5, m = 7, k = 64;
  Vec x = random_vec(n * k, rng), w = random_vec(m * k, rng), cot = random_vec(n * m, rng);
  auto fwd_x = [&](const Vec& xv) {
    Vec y(n * m, 0.0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < m; ++j)
        for (int64_t c = 0; c < k; ++c) y[r * m + j] += xv[r * k + c] * w[j * k + c];
    return y;
  };
  auto fwd_w = [&](const Vec& wv) {
    Vec y(n * m, 0.0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < m; ++j)
        for (int64_t c = 0; c < k; ++c) y[r * m + j] += x[r * k + c] * wv[j * k + c];
    return y;
  };
  Tensor dy = to_tensor(cot, n, m), wt = to_tensor(w, m, k), xt = to_tensor(x, n, k);
  Tensor dx = Tensor::zeros(DType::F32, {n, k}), dw = Tensor::zeros(DType::F32, {m, k});
  matmul_input_grad(dy, wt, dx, GradWrite::Overwrite);
  matmul_weight_grad(dy, xt, dw);
  expect_grad_matches(fwd_x, x, cot, to_vec(dx), 1e-4, "dx");
  expect_grad_matches(fwd_w, w, cot, to_vec(dw), 1e-4, "dw");
  // Accumulate adds on top.
  matmul_input_grad(dy, wt, dx, GradWrite::Accumulate);
  Vec twice = to_vec(dx), once(twice.size());
  Tensor dx1 = Tensor::zeros(DType::F32, {n, k});
  matmul_input_grad(dy, wt, dx1, GradWrite::Overwrite);
  once = to_vec(dx1);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-5);
}

// The weight gradient in both orientations of its register blocks (dA-like:
// few rows, many columns; dB-like: many rows, few columns), with row and
// column tails: equal to an f64 sum, and accumulating over row chunks (as the
// MLP's chunks do) equals one call bit for bit.
TEST(BackwardOps, MatmulWeightGradBlocksAndRowChunks) {
  std::mt19937 rng(5);
  for (auto [m, k] : {std::pair<int64_t, int64_t>{13, 250}, {50, 13}, {16, 576}, {100, 16}, {1, 1}}) {
    const int64_t n = 37;
    Vec dyv = random_vec(n * m, rng), xv = random_vec(n * k, rng), start = random_vec(m * k, rng);
    Tensor dy = to_tensor(dyv, n, m), x = to_tensor(xv, n, k);
    Tensor whole = to_tensor(start, m, k), chunked = to_tensor(start, m, k);
    matmul_weight_grad(dy, x, whole);
    Vec got = to_vec(whole);
    for (int64_t j = 0; j < m; ++j)
      for (int64_t c = 0; c < k; ++c) {
        double want = start[size_t(j * k + c)];
        for (int64_t r = 0; r < n; ++r) want += dyv[size_t(r * m + j)] * xv[size_t(r * k + c)];
        ASSERT_NEAR(got[size_t(j * k + c)], want, 1e-4) << m << "x" << k << " at " << j << "," << c;
      }
    for (int64_t r0 = 0; r0 < n; r0 += 10) {
      const int64_t rows = std::min<int64_t>(10, n - r0);
      Tensor dy_part = to_tensor(Vec(dyv.begin() + r0 * m, dyv.begin() + (r0 + rows) * m), rows, m);
      Tensor x_part = to_tensor(Vec(xv.begin() + r0 * k, xv.begin() + (r0 + rows) * k), rows, k);
      matmul_weight_grad(dy_part, x_part, chunked);
    }
    Vec chunks = to_vec(chunked);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(chunks[i], got[i]) << m << "x" << k << " element " << i;
  }
}

TEST(BackwardOps, MatmulInputGradQuantizedEqualsDequantized) {
  std::mt19937 rng(2);
  const int64_t n = 3, m = 40, k = 256;
  for (DType t : {DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::BF16, DType::F16}) {
    Vec w = random_vec(m * k, rng);
    Tensor wf = to_tensor(w, m, k);
    Tensor wq = convert(wf, t);
    Tensor wd = convert(wq, DType::F32);  // what the quantized rows decode to
    Tensor dy = to_tensor(random_vec(n * m, rng), n, m);
    Tensor a = Tensor::zeros(DType::F32, {n, k}), b = Tensor::zeros(DType::F32, {n, k});
    matmul_input_grad(dy, wq, a, GradWrite::Overwrite);
    matmul_input_grad(dy, wd, b, GradWrite::Overwrite);
    Vec va = to_vec(a), vb = to_vec(b);
    for (size_t i = 0; i < va.size(); ++i) ASSERT_NEAR(va[i], vb[i], 1e-4) << dtype_name(t);
  }
}

// The AVX-512 register blocks (32 columns) sum the weight rows in the same
// order as AVX2's (16 columns): the same dx, bit for bit, over rows that
// are not a multiple of 4 and columns that end in a 16- and a scalar tail.
TEST(BackwardOps, MatmulInputGradSameOnEveryInstructionSet) {
  std::mt19937 rng(9);
  const int64_t n = 7, m = 45, k = 250;
  Tensor dy = to_tensor(random_vec(n * m, rng), n, m), w = to_tensor(random_vec(m * k, rng), m, k);
  std::vector<Vec> results;
  for (cpu::Isa isa : cpu::available_isas()) {
    if (isa == cpu::Isa::Scalar) continue;
    cpu::set_isa_override(isa);
    Tensor dx = to_tensor(random_vec(n * k, rng), n, k);
    Tensor start = to_tensor(to_vec(dx), n, k);
    matmul_input_grad(dy, w, dx, GradWrite::Accumulate);
    cpu::clear_isa_override();
    Vec got = to_vec(dx), base = to_vec(start);
    for (size_t i = 0; i < got.size(); ++i) got[i] -= base[i];
    results.push_back(got);
  }
  for (size_t r = 1; r < results.size(); ++r)
    for (size_t i = 0; i < results[0].size(); ++i) ASSERT_NEAR(results[r][i], results[0][i], 1e-5) << "element " << i;
}

// Σ_t |a(r, t)·b(t, c)| and Σ_t a(r, t)·b(t, c) in f64 (a [n, T], b [T, w]).
std::pair<Vec, Vec> sums_and_sizes(const Vec& a, const Vec& b, int64_t n, int64_t T, int64_t w) {
  Vec sum(size_t(n * w), 0.0), size(size_t(n * w), 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < w; ++c) {
        const double p = a[size_t(r * T + t)] * b[size_t(t * w + c)];
        sum[size_t(r * w + c)] += p;
        size[size_t(r * w + c)] += std::abs(p);
      }
  return {sum, size};
}

// The AMX GEMM (backend/cpu/amx_gemm.h) against an f64 sum, over row,
// column and t tails, B as stored and transposed, accumulating and not:
// split hi + lo inputs keep ~2⁻¹⁶ of Σ|a·b| (f32-like), plain bf16 inputs
// 2⁻⁸ (each input rounded once, f32 sums).
TEST(BackwardOps, AmxGemmSplitAndPlainBf16Bounds) {
  if (!cpu::amx_bf16_available()) GTEST_SKIP() << "no AMX bf16 on this CPU";
  std::mt19937 rng(11);
  for (auto [n, T, w] : {std::tuple<int64_t, int64_t, int64_t>{37, 45, 250}, {8, 33, 16}, {70, 96, 64}, {9, 1, 40}}) {
    const Vec a = random_vec(n * T, rng), b = random_vec(T * w, rng), start = random_vec(n * w, rng);
    Vec bt(b.size());  // [w, T]
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < w; ++c) bt[size_t(c * T + t)] = b[size_t(t * w + c)];
    const auto [sum, size] = sums_and_sizes(a, b, n, T, w);
    std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()), btf(bt.begin(), bt.end());
    for (bool split : {true, false})
      for (bool transposed : {false, true})
        for (bool accumulate : {false, true}) {
          std::vector<float> out(start.begin(), start.end());
          backend::cpu::amx_gemm({.a = af.data(),
                                  .lda = T,
                                  .b = transposed ? btf.data() : bf.data(),
                                  .ldb = transposed ? T : w,
                                  .out = out.data(),
                                  .ldo = w,
                                  .rows = n,
                                  .width = w,
                                  .T = T,
                                  .accumulate = accumulate,
                                  .split = split,
                                  .b_transposed = transposed});
          for (size_t i = 0; i < out.size(); ++i) {
            const double want = sum[i] + (accumulate ? start[i] : 0.0);
            const double tol = (split ? 2e-5 : 8e-3) * size[i] + 1e-6 * (1 + std::abs(want));
            ASSERT_NEAR(out[i], want, tol) << n << "x" << T << "x" << w << " split " << split << " transposed "
                                           << transposed << " accumulate " << accumulate << " element " << i;
          }
        }
  }
}

// A quantized weight's products on AMX (bf16 inputs, f32 sums): the input
// gradient and the training forward within the bf16 bound of an f64 sum
// over the decoded weight; an f32 weight keeps the f32 path (no AMX).
TEST(BackwardOps, QuantizedProductsOnAmxStayWithinTheBf16Bound) {
  if (!cpu::amx_bf16_available()) GTEST_SKIP() << "no AMX bf16 on this CPU";
  std::mt19937 rng(12);
  for (auto [n, m, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 70, 256}, {8, 64, 64}, {70, 96, 96}}) {
    for (DType t : {DType::Q4_1, DType::Q8_0, DType::Q4_K}) {
      if (k % dtype_info(t).block_elems != 0) continue;
      Tensor w = convert(to_tensor(random_vec(m * k, rng), m, k), t);
      const Vec wd = to_vec(convert(w, DType::F32));  // [m, k]
      Vec wdt(wd.size());                             // [k, m]
      for (int64_t j = 0; j < m; ++j)
        for (int64_t c = 0; c < k; ++c) wdt[size_t(c * m + j)] = wd[size_t(j * k + c)];
      const Vec dyv = random_vec(n * m, rng), xv = random_vec(n * k, rng), start = random_vec(n * k, rng);
      // dx (+)= dy·W
      Tensor dy = to_tensor(dyv, n, m), dx = to_tensor(start, n, k), fresh = to_tensor(start, n, k);
      cpu::set_amx_override(true);
      matmul_input_grad(dy, w, dx, GradWrite::Accumulate);
      matmul_input_grad(dy, w, fresh, GradWrite::Overwrite);
      const auto [gsum, gsize] = sums_and_sizes(dyv, wd, n, m, k);
      const Vec got = to_vec(dx), over = to_vec(fresh);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(over[i], gsum[i], 8e-3 * gsize[i] + 1e-6) << dtype_name(t) << " dx element " << i;
        ASSERT_NEAR(got[i], start[i] + gsum[i], 8e-3 * gsize[i] + 1e-5) << dtype_name(t) << " dx element " << i;
      }
      // y = x·Wᵀ
      Tensor x = to_tensor(xv, n, k), y = Tensor::zeros(DType::F32, {n, m});
      const backend::cpu::TrainingMatmulArgs args{.x = x.data_as<float>(),
                                                  .ldx = k,
                                                  .wtype = t,
                                                  .w = w.data(),
                                                  .w_row_bytes = size_t(w.stride(0)),
                                                  .y = y.data_as<float>(),
                                                  .ldy = m,
                                                  .n = n,
                                                  .m = m,
                                                  .k = k};
      ASSERT_TRUE(backend::cpu::training_matmul_amx(args));
      cpu::clear_amx_override();
      const auto [ysum, ysize] = sums_and_sizes(xv, wdt, n, k, m);
      const Vec yv = to_vec(y);
      for (size_t i = 0; i < yv.size(); ++i)
        ASSERT_NEAR(yv[i], ysum[i], 8e-3 * ysize[i] + 1e-6) << dtype_name(t) << " y element " << i;
    }
  }
  Tensor wf = to_tensor(random_vec(64 * 64, rng), 64, 64), x = to_tensor(random_vec(16 * 64, rng), 16, 64);
  Tensor y = Tensor::zeros(DType::F32, {16, 64});
  EXPECT_FALSE(backend::cpu::training_matmul_amx({.x = x.data_as<float>(),
                                                  .ldx = 64,
                                                  .wtype = DType::F32,
                                                  .w = wf.data(),
                                                  .w_row_bytes = 256,
                                                  .y = y.data_as<float>(),
                                                  .ldy = 64,
                                                  .n = 16,
                                                  .m = 64,
                                                  .k = 64}));
}

TEST(BackwardOps, RmsNorm) {
  std::mt19937 rng(3);
  const int64_t n = 4, d = 16;
  const double eps = 1e-5;
  Vec x = random_vec(n * d, rng), w = random_vec(d, rng), cot = random_vec(n * d, rng);
  auto fwd = [&](const Vec& xv) {
    Vec y(n * d);
    for (int64_t r = 0; r < n; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < d; ++i) ss += xv[r * d + i] * xv[r * d + i];
      const double rs = 1.0 / std::sqrt(ss / d + eps);
      for (int64_t i = 0; i < d; ++i) y[r * d + i] = xv[r * d + i] * rs * w[i];
    }
    return y;
  };
  Vec base = random_vec(n * d, rng);  // dx accumulates onto existing values
  Tensor dx = to_tensor(base, n, d);
  Tensor wt = to_tensor(w, 1, d).reshape({d});
  rms_norm_backward(to_tensor(x, n, d), wt, float(eps), to_tensor(cot, n, d), dx);
  Vec got = to_vec(dx);
  for (size_t i = 0; i < got.size(); ++i) got[i] -= double(float(base[i]));
  expect_grad_matches(fwd, x, cot, got, 1e-4, "rms_norm dx");
}

TEST(BackwardOps, Swiglu) {
  std::mt19937 rng(4);
  const int64_t n = 3, d = 10;
  Vec g = random_vec(n * d, rng, 2.0), u = random_vec(n * d, rng), cot = random_vec(n * d, rng);
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  auto fwd_g = [&](const Vec& gv) {
    Vec y(n * d);
    for (size_t i = 0; i < y.size(); ++i) y[i] = silu(gv[i]) * u[i];
    return y;
  };
  auto fwd_u = [&](const Vec& uv) {
    Vec y(n * d);
    for (size_t i = 0; i < y.size(); ++i) y[i] = silu(g[i]) * uv[i];
    return y;
  };
  Tensor dg = Tensor::zeros(DType::F32, {n, d}), du = Tensor::zeros(DType::F32, {n, d});
  swiglu_backward(to_tensor(g, n, d), to_tensor(u, n, d), to_tensor(cot, n, d), dg, du);
  expect_grad_matches(fwd_g, g, cot, to_vec(dg), 1e-4, "swiglu dgate");
  expect_grad_matches(fwd_u, u, cot, to_vec(du), 1e-4, "swiglu dup");
}

TEST(BackwardOps, RopeBothStyles) {
  std::mt19937 rng(5);
  const int64_t n = 4;
  const int heads = 2, hd = 8;
  std::vector<int32_t> pos = {0, 3, 7, 100};
  auto inv = rope_inv_freq(hd, 10000.0f, {});
  for (RopeStyle style : {RopeStyle::NeoX, RopeStyle::Interleaved}) {
    Vec x = random_vec(n * heads * hd, rng), cot = random_vec(n * heads * hd, rng);
    auto fwd = [&](const Vec& xv) {
      Vec y = xv;
      for (int64_t r = 0; r < n; ++r)
        for (int h = 0; h < heads; ++h)
          for (int i = 0; i < hd / 2; ++i) {
            const double ang = double(float(float(pos[r]) * inv[i]));
            const int64_t base = r * heads * hd + h * hd;
            const int64_t a = style == RopeStyle::NeoX ? base + i : base + 2 * i;
            const int64_t b = style == RopeStyle::NeoX ? base + i + hd / 2 : base + 2 * i + 1;
            y[a] = xv[a] * std::cos(ang) - xv[b] * std::sin(ang);
            y[b] = xv[a] * std::sin(ang) + xv[b] * std::cos(ang);
          }
      return y;
    };
    Tensor dx = to_tensor(cot, n, heads * hd);
    rope_backward(dx, pos, {.style = style, .n_heads = heads, .head_dim = hd, .inv_freq = inv});
    expect_grad_matches(fwd, x, cot, to_vec(dx), 1e-4, "rope dx");
  }
}

// f64 reference of the dense masked attention.
struct AttnRef {
  int64_t n;
  int heads, kv_heads, hd;
  std::vector<AttentionSpan> spans;
  std::vector<uint8_t> branch;
  std::vector<int32_t> pos;
  int window = 0;
  bool visible(int64_t i, int64_t j) const {
    if (j > i) return false;
    if (!branch.empty() && branch[j] != 0 && branch[j] != branch[i]) return false;
    if (window > 0 && pos[i] - pos[j] >= window) return false;
    return true;
  }
  Vec operator()(const Vec& q, const Vec& k, const Vec& v) const {
    Vec out(n * heads * hd, 0.0);
    const double scale = 1.0 / std::sqrt(double(hd));
    for (const auto& s : spans)
      for (int h = 0; h < heads; ++h) {
        const int kvh = h / (heads / kv_heads);
        for (int64_t i = s.first_row; i < s.first_row + s.n_rows; ++i) {
          std::vector<double> sc;
          std::vector<int64_t> js;
          double mx = -1e300;
          for (int64_t j = s.first_row; j <= i; ++j) {
            if (!visible(i, j)) continue;
            double d = 0;
            for (int c = 0; c < hd; ++c) d += q[(i * heads + h) * hd + c] * k[(j * kv_heads + kvh) * hd + c];
            sc.push_back(d * scale);
            js.push_back(j);
            mx = std::max(mx, d * scale);
          }
          double sum = 0;
          for (double& e : sc) sum += (e = std::exp(e - mx));
          for (size_t t = 0; t < js.size(); ++t)
            for (int c = 0; c < hd; ++c)
              out[(i * heads + h) * hd + c] += sc[t] / sum * v[(js[t] * kv_heads + kvh) * hd + c];
        }
      }
    return out;
  }
};

void check_attention(AttnRef ref, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t qd = ref.heads * ref.hd, kd = ref.kv_heads * ref.hd;
  Vec q = random_vec(ref.n * qd, rng), k = random_vec(ref.n * kd, rng), v = random_vec(ref.n * kd, rng);
  Vec cot = random_vec(ref.n * qd, rng);
  DenseAttentionLayout layout{.spans = ref.spans, .branch = ref.branch, .positions = ref.pos};
  DenseAttentionParams params{.n_heads = ref.heads,
                              .n_kv_heads = ref.kv_heads,
                              .head_dim = ref.hd,
                              .scale = float(1.0 / std::sqrt(double(ref.hd))),
                              .sliding_window = ref.window};
  Tensor qt = to_tensor(q, ref.n, qd), kt = to_tensor(k, ref.n, kd), vt = to_tensor(v, ref.n, kd);
  Tensor out = Tensor::zeros(DType::F32, {ref.n, qd}), lse = Tensor::zeros(DType::F32, {ref.n, ref.heads});
  dense_attention({.q = qt, .k = kt, .v = vt}, layout, params, out, lse);
  Vec want = ref(q, k, v), got = to_vec(out);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5);
  Tensor dq = Tensor::zeros(DType::F32, {ref.n, qd}), dk = Tensor::zeros(DType::F32, {ref.n, kd}),
         dv = Tensor::zeros(DType::F32, {ref.n, kd});
  dense_attention_backward({.q = qt, .k = kt, .v = vt}, {.out = out, .lse = lse, .dout = to_tensor(cot, ref.n, qd)},
                           layout, params, {.dq = dq, .dk = dk, .dv = dv});
  expect_grad_matches([&](const Vec& x) { return ref(x, k, v); }, q, cot, to_vec(dq), 1e-4, "attention dq");
  expect_grad_matches([&](const Vec& x) { return ref(q, x, v); }, k, cot, to_vec(dk), 1e-4, "attention dk");
  expect_grad_matches([&](const Vec& x) { return ref(q, k, x); }, v, cot, to_vec(dv), 1e-4, "attention dv");
}

TEST(BackwardOps, DenseAttentionCausalGqaTwoSpans) {
  check_attention({.n = 7,
                   .heads = 4,
                   .kv_heads = 2,
                   .hd = 8,
                   .spans = {{0, 3}, {3, 4}},
                   .branch = {},
                   .pos = {0, 1, 2, 0, 1, 2, 3}},
                  6);
}

TEST(BackwardOps, DenseAttentionPrefixSharedBranchesAndWindow) {
  // [prompt(2); chosen(2); rejected(3)]: rejected rows must not see chosen rows.
  check_attention({.n = 7,
                   .heads = 2,
                   .kv_heads = 1,
                   .hd = 4,
                   .spans = {{0, 7}},
                   .branch = {0, 0, 1, 1, 2, 2, 2},
                   .pos = {0, 1, 2, 3, 2, 3, 4}},
                  7);
  check_attention({.n = 6,
                   .heads = 2,
                   .kv_heads = 2,
                   .hd = 4,
                   .spans = {{0, 6}},
                   .branch = {},
                   .pos = {0, 1, 2, 3, 4, 5},
                   .window = 3},
                  8);
}

// The AVX-512 attention (blocks of 32 query rows, backward in chunks of
// query blocks with partial dK/dV sums) against the vector loop the tests
// above check with finite differences: spans of several blocks, a
// prefix-shared span, a sliding window, GQA and a head_dim that is not a
// multiple of 16.
TEST(BackwardOps, DenseAttentionBlocksEqualVectorLoop) {
  bool has_avx512 = false;
  for (cpu::Isa isa : cpu::available_isas()) has_avx512 |= isa >= cpu::Isa::Avx512;
  if (!has_avx512) GTEST_SKIP() << "skipped: no AVX-512 on this CPU";
  const int64_t n = 230;
  const int heads = 6, kv_heads = 2, hd = 24;
  std::vector<AttentionSpan> spans{{0, 70}, {70, 160}};
  std::vector<uint8_t> branch(static_cast<size_t>(n), 0);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < 70; ++i) pos[size_t(i)] = int32_t(i);
  // second span: [prompt 40; chosen 55; rejected 65], each branch's positions restart at 40
  for (int64_t i = 70; i < n; ++i) {
    const int64_t r = i - 70;
    branch[size_t(i)] = r < 40 ? 0 : r < 95 ? 1 : 2;
    pos[size_t(i)] = int32_t(r < 95 ? r : r - 55);
  }
  std::mt19937 rng(11);
  const int64_t qd = heads * hd, kd = kv_heads * hd;
  Tensor q = to_tensor(random_vec(n * qd, rng), n, qd), k = to_tensor(random_vec(n * kd, rng), n, kd),
         v = to_tensor(random_vec(n * kd, rng), n, kd), dout = to_tensor(random_vec(n * qd, rng), n, qd);
  for (int window : {0, 50}) {
    DenseAttentionLayout layout{.spans = spans, .branch = branch, .positions = pos};
    DenseAttentionParams params{
        .n_heads = heads, .n_kv_heads = kv_heads, .head_dim = hd, .scale = 0.2f, .sliding_window = window};
    std::vector<Vec> results;
    for (cpu::Isa isa : {cpu::Isa::Avx2, cpu::active_isa()}) {
      cpu::set_isa_override(isa);
      Tensor out = Tensor::zeros(DType::F32, {n, qd}), lse = Tensor::zeros(DType::F32, {n, heads});
      dense_attention({.q = q, .k = k, .v = v}, layout, params, out, lse);
      Tensor dq = Tensor::zeros(DType::F32, {n, qd}), dk = Tensor::zeros(DType::F32, {n, kd}),
             dv = Tensor::zeros(DType::F32, {n, kd});
      dense_attention_backward({.q = q, .k = k, .v = v}, {.out = out, .lse = lse, .dout = dout}, layout, params,
                               {.dq = dq, .dk = dk, .dv = dv});
      cpu::clear_isa_override();
      Vec all;
      for (const Tensor* t : {&out, &lse, &dq, &dk, &dv}) {
        Vec part = to_vec(*t);
        all.insert(all.end(), part.begin(), part.end());
      }
      results.push_back(all);
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i)
      ASSERT_NEAR(results[1][i], results[0][i], 2e-5 * std::max(1.0, std::abs(results[0][i])))
          << "window " << window << " element " << i;
  }
}

// The gated delta rule with its q/k L2 norms (ops/gated_delta_rule_backward.h), in f64: two sequences (37 rows,
// past the backward's 32-row checkpoint interval, and 5), 2 key heads serving 4 value heads.
TEST(BackwardOps, GatedDeltaRuleTwoSequencesGqaAcrossCheckpoints) {
  std::mt19937 rng(47);
  const int nk = 2, nv = 4, dk = 4, dv = 3;
  const std::vector<RecurrentSequence> seqs{{.first_row = 0, .n_rows = 37, .state_slot = 0, .starts = true},
                                            {.first_row = 37, .n_rows = 5, .state_slot = 1, .starts = true}};
  const int64_t n = 42, kw = nk * dk, vw = nv * dv;
  Vec q = random_vec(n * kw, rng), k = random_vec(n * kw, rng), v = random_vec(n * vw, rng);
  Vec g(n * nv), beta(n * nv);
  std::uniform_real_distribution<double> decay(-2.0, -0.05), strength(0.1, 0.9);
  for (auto& x : g) x = decay(rng);
  for (auto& x : beta) x = strength(rng);
  const Vec cot = random_vec(n * vw, rng);
  auto forward = [&](const Vec& qv, const Vec& kv, const Vec& vv, const Vec& gv, const Vec& bv) {
    Vec out(n * vw, 0.0);
    for (const RecurrentSequence& s : seqs)
      for (int h = 0; h < nv; ++h) {
        const int kh = h / (nv / nk);
        std::vector<double> S(dk * dv, 0.0);
        for (int64_t t = s.first_row; t < s.first_row + s.n_rows; ++t) {
          double qn = 1e-6, kn = 1e-6;
          for (int i = 0; i < dk; ++i) qn += qv[t * kw + kh * dk + i] * qv[t * kw + kh * dk + i];
          for (int i = 0; i < dk; ++i) kn += kv[t * kw + kh * dk + i] * kv[t * kw + kh * dk + i];
          std::vector<double> qh(dk), kh_(dk);
          for (int i = 0; i < dk; ++i) {
            qh[i] = qv[t * kw + kh * dk + i] / std::sqrt(qn) / std::sqrt(double(dk));
            kh_[i] = kv[t * kw + kh * dk + i] / std::sqrt(kn);
          }
          const double alpha = std::exp(gv[t * nv + h]), b = bv[t * nv + h];
          for (auto& x : S) x *= alpha;
          for (int j = 0; j < dv; ++j) {
            double pred = 0;
            for (int i = 0; i < dk; ++i) pred += S[i * dv + j] * kh_[i];
            const double delta = b * (vv[t * vw + h * dv + j] - pred);
            for (int i = 0; i < dk; ++i) S[i * dv + j] += kh_[i] * delta;
          }
          for (int j = 0; j < dv; ++j) {
            double o = 0;
            for (int i = 0; i < dk; ++i) o += S[i * dv + j] * qh[i];
            out[t * vw + h * dv + j] = o;
          }
        }
      }
    return out;
  };
  Tensor dq = Tensor::zeros(DType::F32, {n, kw}), dk_t = Tensor::zeros(DType::F32, {n, kw}),
         dv_t = Tensor::zeros(DType::F32, {n, vw}), dg = Tensor::zeros(DType::F32, {n, nv}),
         db = Tensor::zeros(DType::F32, {n, nv});
  gated_delta_rule_backward({.q = to_tensor(q, n, kw),
                             .k = to_tensor(k, n, kw),
                             .v = to_tensor(v, n, vw),
                             .g = to_tensor(g, n, nv),
                             .beta = to_tensor(beta, n, nv)},
                            {.n_k_heads = nk, .n_v_heads = nv, .key_dim = dk, .value_dim = dv}, seqs,
                            to_tensor(cot, n, vw), {.dq = dq, .dk = dk_t, .dv = dv_t, .dg = dg, .dbeta = db});
  expect_grad_matches([&](const Vec& x) { return forward(x, k, v, g, beta); }, q, cot, to_vec(dq), 1e-4, "dq");
  expect_grad_matches([&](const Vec& x) { return forward(q, x, v, g, beta); }, k, cot, to_vec(dk_t), 1e-4, "dk");
  expect_grad_matches([&](const Vec& x) { return forward(q, k, x, g, beta); }, v, cot, to_vec(dv_t), 1e-4, "dv");
  expect_grad_matches([&](const Vec& x) { return forward(q, k, v, x, beta); }, g, cot, to_vec(dg), 1e-4, "dg");
  expect_grad_matches([&](const Vec& x) { return forward(q, k, v, g, x); }, beta, cot, to_vec(db), 1e-4, "dbeta");
}

// g = −e^{a_log}·softplus(a + dt_bias), β = σ(b).
TEST(BackwardOps, DeltaRuleGates) {
  std::mt19937 rng(48);
  const int64_t n = 5, h = 3;
  Vec a = random_vec(n * h, rng, 2.0), b = random_vec(n * h, rng, 2.0), a_log = random_vec(h, rng),
      dt = random_vec(h, rng), cot_g = random_vec(n * h, rng), cot_b = random_vec(n * h, rng);
  auto gates = [&](const Vec& av, const Vec& bv) {
    Vec y(2 * n * h);  // g then β
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < h; ++j) {
        y[r * h + j] = -std::exp(a_log[j]) * std::log1p(std::exp(av[r * h + j] + dt[j]));
        y[n * h + r * h + j] = 1.0 / (1.0 + std::exp(-bv[r * h + j]));
      }
    return y;
  };
  Vec cot = cot_g;
  cot.insert(cot.end(), cot_b.begin(), cot_b.end());
  Tensor da = Tensor::zeros(DType::F32, {n, h}), db = Tensor::zeros(DType::F32, {n, h});
  const Tensor al = to_tensor(a_log, 1, h).reshape({h}), dtb = to_tensor(dt, 1, h).reshape({h});
  delta_rule_gates_backward(to_tensor(a, n, h), to_tensor(b, n, h), {.a_log = al, .dt_bias = dtb},
                            to_tensor(cot_g, n, h), to_tensor(cot_b, n, h), da, db);
  expect_grad_matches([&](const Vec& x) { return gates(x, b); }, a, cot, to_vec(da), 1e-4, "da");
  expect_grad_matches([&](const Vec& x) { return gates(a, x); }, b, cot, to_vec(db), 1e-4, "db");
}

// The causal depthwise conv1d + SiLU over two sequences (inputs before each are 0), kernel 4.
TEST(BackwardOps, CausalConv1dSiluTwoSequences) {
  std::mt19937 rng(49);
  const int64_t n = 11, C = 5, K = 4;
  const std::vector<RecurrentSequence> seqs{{.first_row = 0, .n_rows = 7, .state_slot = 0, .starts = true},
                                            {.first_row = 7, .n_rows = 4, .state_slot = 1, .starts = true}};
  Vec x = random_vec(n * C, rng), w = random_vec(C * K, rng), cot = random_vec(n * C, rng);
  auto fwd = [&](const Vec& xv) {
    Vec y(n * C, 0.0);
    for (const RecurrentSequence& s : seqs)
      for (int64_t t = s.first_row; t < s.first_row + s.n_rows; ++t)
        for (int64_t c = 0; c < C; ++c) {
          double p = 0;
          for (int64_t j = 0; j < K; ++j) {
            const int64_t src = t - (K - 1) + j;
            if (src >= s.first_row) p += w[c * K + j] * xv[src * C + c];
          }
          y[t * C + c] = p / (1.0 + std::exp(-p));
        }
    return y;
  };
  Tensor dx = Tensor::zeros(DType::F32, {n, C});
  causal_conv1d_silu_backward(to_tensor(x, n, C), to_tensor(w, C, K), seqs, to_tensor(cot, n, C), dx);
  expect_grad_matches(fwd, x, cot, to_vec(dx), 1e-4, "conv dx");
}

// A sequence continuing a conv state (a prefix-shared branch: its K−1 inputs before it are its prompt's last rows),
// beside one that starts: d x of both and d of the state, kernel 4, the continuing sequence shorter than K−1 too.
TEST(BackwardOps, CausalConv1dSiluContinuingAState) {
  std::mt19937 rng(51);
  const int64_t C = 5, K = 4;
  for (const int32_t rows : {6, 2}) {
    const int64_t n = 3 + rows;
    const std::vector<RecurrentSequence> seqs{{.first_row = 0, .n_rows = 3, .state_slot = 0, .starts = true},
                                              {.first_row = 3, .n_rows = rows, .state_slot = 1, .starts = false}};
    Vec x = random_vec(n * C, rng), w = random_vec(C * K, rng), state = random_vec(2 * (K - 1) * C, rng),
        cot = random_vec(n * C, rng);
    auto fwd = [&](const Vec& xv, const Vec& sv) {
      Vec y(n * C, 0.0);
      for (const RecurrentSequence& s : seqs)
        for (int64_t t = s.first_row; t < s.first_row + s.n_rows; ++t)
          for (int64_t c = 0; c < C; ++c) {
            double p = 0;
            for (int64_t j = 0; j < K; ++j) {
              const int64_t src = t - (K - 1) + j;
              if (src >= s.first_row)
                p += w[c * K + j] * xv[src * C + c];
              else if (!s.starts)
                p += w[c * K + j] * sv[(s.state_slot * (K - 1) + (src - s.first_row + K - 1)) * C + c];
            }
            y[t * C + c] = p / (1.0 + std::exp(-p));
          }
      return y;
    };
    Tensor dx = Tensor::zeros(DType::F32, {n, C}), d_state = Tensor::zeros(DType::F32, {2, K - 1, C});
    const Tensor st = to_tensor(state, 2 * (K - 1), C).reshape({2, K - 1, C});
    causal_conv1d_silu_backward(to_tensor(x, n, C), to_tensor(w, C, K), seqs, to_tensor(cot, n, C), dx,
                                {.state = &st, .d_state = &d_state});
    expect_grad_matches([&](const Vec& v) { return fwd(v, state); }, x, cot, to_vec(dx), 1e-4, "conv dx");
    Vec d_slot1 = to_vec(d_state.reshape({2 * (K - 1), C}));
    std::fill_n(d_slot1.begin(), (K - 1) * C, 0.0);  // slot 0 starts: not written, not read
    expect_grad_matches([&](const Vec& v) { return fwd(x, v); }, state, cot, d_slot1, 1e-4, "conv d state");
  }
}

// y = x·σ(g), per element and with one gate per row.
TEST(BackwardOps, SigmoidGate) {
  std::mt19937 rng(50);
  const int64_t n = 3, d = 6;
  for (const bool per_row : {false, true}) {
    const int64_t gd = per_row ? 1 : d;
    Vec x = random_vec(n * d, rng), g = random_vec(n * gd, rng, 2.0), cot = random_vec(n * d, rng);
    auto fwd = [&](const Vec& xv, const Vec& gv) {
      Vec y(n * d);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < d; ++i)
          y[r * d + i] = xv[r * d + i] / (1.0 + std::exp(-gv[r * gd + (per_row ? 0 : i)]));
      return y;
    };
    Tensor dx = Tensor::zeros(DType::F32, {n, d}), dg = Tensor::zeros(DType::F32, {n, gd});
    sigmoid_gate_backward(to_tensor(g, n, gd), to_tensor(x, n, d), to_tensor(cot, n, d), dx, dg);
    expect_grad_matches([&](const Vec& v) { return fwd(v, g); }, x, cot, to_vec(dx), 1e-4, "sigmoid_gate dx");
    expect_grad_matches([&](const Vec& v) { return fwd(x, v); }, g, cot, to_vec(dg), 1e-4, "sigmoid_gate dg");
  }
}

}  // namespace
}  // namespace brioche::ops
