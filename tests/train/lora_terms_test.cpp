// The served adapters' terms handed to the base projections (ops::LoraTerms
// in ops/fused_matmul.h): matmul_group and swiglu_matmul of x̂ and
// matmul_accumulate give what they give without the terms, plus each adapted
// row's (x̂·Aᵀ)·bt, here computed by plain loops from the f16 factors
// (before the SwiGLU for gate and up). On the CPU, and on CUDA through the
// streamed decode GEMV that adds the terms itself and the paths that leave
// them to the expand kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/lora_rows.h"
#include "core/error.h"
#include "core/half.h"
#include "ops/device.h"
#include "ops/fused_matmul.h"
#include "ops/lora_rows.h"
#include "ops/quantize.h"

namespace brioche::ops {
namespace {

constexpr float kEps = 1e-5f;
constexpr int32_t kRankCap = 16;

struct ProjShape {
  int64_t n, k, m;  // rows of x, its width, each projection's outputs
  DType wtype;
  std::string name() const {
    return "n" + std::to_string(n) + "_k" + std::to_string(k) + "_m" + std::to_string(m) + "_" +
           std::string(dtype_name(wtype));
  }
};

// Three projections of one x (Q/K/V-like, or gate, up and a down of width
// m → m) with two adapters: slot 0 rank 16 on every part, slot 1 rank 5 on
// part 0 only; rows cycle through slot 0, no adapter, slot 1.
struct TermsCase {
  ProjShape s;
  std::mt19937 rng{11};
  std::normal_distribution<float> normal{0.0f, 1.0f};
  std::vector<float> x, norm_w;                  // [n, k], [k]
  std::vector<float> h, residual;                // [n, m] each: the accumulate's input and y
  std::vector<Tensor> weights;                   // 3 × [m, k] of s.wtype (part 2 is [m, m] for accumulate)
  std::vector<std::vector<uint16_t>> a_f16, bt;  // per (slot, part): [rank, in], [rank, m] (empty: none)
  std::vector<int32_t> slots;

  std::vector<float> randn(int64_t count, float scale) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& f : v) f = scale * normal(rng);
    return v;
  }
  std::vector<uint16_t> f16(int64_t count, float scale) {
    std::vector<uint16_t> v(static_cast<size_t>(count));
    for (uint16_t& h : v) h = f32_to_f16(scale * normal(rng));
    return v;
  }
  explicit TermsCase(const ProjShape& shape) : s(shape) {
    x = randn(s.n * s.k, 3.0f);
    norm_w = randn(s.k, 1.0f);
    for (int p = 0; p < 3; ++p) {
      const int64_t in = p == 2 ? s.m : s.k;
      Tensor w = Tensor::zeros(DType::F32, {s.m, in});
      const std::vector<float> v = randn(s.m * in, 0.05f);
      std::memcpy(w.data(), v.data(), v.size() * 4);
      weights.push_back(s.wtype == DType::F32 ? w : convert(w, s.wtype));
    }
    const int ranks[2][3] = {{16, 16, 16}, {5, 0, 0}};
    for (auto& slot : ranks)
      for (int p = 0; p < 3; ++p) {
        const int64_t in = p == 2 ? s.m : s.k;
        a_f16.push_back(slot[p] ? f16(slot[p] * in, 0.05f) : std::vector<uint16_t>());
        bt.push_back(slot[p] ? f16(slot[p] * s.m, 0.05f) : std::vector<uint16_t>());
      }
    h = randn(s.n * s.m, 1.0f);
    residual = randn(s.n * s.m, 1.0f);
    for (int64_t r = 0; r < s.n; ++r) slots.push_back(r % 3 == 0 ? 0 : r % 3 == 1 ? -1 : 1);
  }
  int rank(int slot, int p) const { return int(a_f16[size_t(slot * 3 + p)].size() / size_t(p == 2 ? s.m : s.k)); }

  // x̂ = x·rstd ⊙ norm_w, row r.
  std::vector<float> normed_row(int64_t r) const {
    double ss = 0;
    for (int64_t c = 0; c < s.k; ++c) ss += double(x[size_t(r * s.k + c)]) * x[size_t(r * s.k + c)];
    const float rstd = float(1.0 / std::sqrt(ss / double(s.k) + kEps));
    std::vector<float> out(size_t(s.k));
    for (int64_t c = 0; c < s.k; ++c) out[size_t(c)] = x[size_t(r * s.k + c)] * rstd * norm_w[size_t(c)];
    return out;
  }
  // Part p's term of row r (input in_row), every output column.
  std::vector<double> term(int64_t r, int p, const std::vector<float>& in_row) const {
    std::vector<double> t(size_t(s.m), 0.0);
    const int slot = slots[size_t(r)];
    if (slot < 0 || rank(slot, p) == 0) return t;
    const auto& a = a_f16[size_t(slot * 3 + p)];
    const auto& b = bt[size_t(slot * 3 + p)];
    for (int k = 0; k < rank(slot, p); ++k) {
      double u = 0;
      for (size_t c = 0; c < in_row.size(); ++c) u += double(f16_to_f32(a[k * in_row.size() + c])) * in_row[c];
      for (int64_t c = 0; c < s.m; ++c) t[size_t(c)] += u * f16_to_f32(b[size_t(k * s.m + c)]);
    }
    return t;
  }
};

// A copy of a 1-D or 2-D t on d.
Tensor on(const Tensor& t, Device d) {
  Tensor out = t.rank() == 1 ? zeros(t.dtype(), {t.dim(0)}, d) : zeros(t.dtype(), {t.dim(0), t.dim(1)}, d);
  copy(t, out);
  return out;
}
// v as f32 [rows, cols] on d ([rows] when cols is 0).
Tensor from(const std::vector<float>& v, int64_t rows, int64_t cols, Device d) {
  Tensor t = cols ? Tensor::zeros(DType::F32, {rows, cols}) : Tensor::zeros(DType::F32, {rows});
  std::memcpy(t.data(), v.data(), v.size() * 4);
  return on(t, d);
}
std::vector<float> values(const Tensor& t) {
  const Tensor c = on(t, Device::CPU);
  return std::vector<float>(c.data_as<float>(), c.data_as<float>() + c.numel());
}

// The case's table on device d: factors, slot words and row slots.
struct DeviceTable {
  std::vector<Tensor> factors;
  Tensor words, row_slot;
  DeviceTable(const TermsCase& c, Device d) {
    std::vector<backend::cpu::LoraFactors> entries;
    for (size_t i = 0; i < c.a_f16.size(); ++i) {
      if (c.a_f16[i].empty()) {
        entries.push_back({});
        continue;
      }
      const int p = int(i % 3);
      const int64_t rank = int64_t(c.bt[i].size()) / c.s.m, in = p == 2 ? c.s.m : c.s.k;
      Tensor a = Tensor::zeros(DType::F16, {rank, in}), b = Tensor::zeros(DType::F16, {rank, c.s.m});
      std::memcpy(a.data(), c.a_f16[i].data(), c.a_f16[i].size() * 2);
      std::memcpy(b.data(), c.bt[i].data(), c.bt[i].size() * 2);
      factors.push_back(on(a, d));
      factors.push_back(on(b, d));
      entries.push_back({.a = factors[factors.size() - 2].data_as<uint16_t>(),
                         .bt = factors.back().data_as<uint16_t>(),
                         .rank = int32_t(rank)});
    }
    Tensor w = Tensor::zeros(DType::I32, {int64_t(entries.size() * 6)});
    std::memcpy(w.data(), entries.data(), entries.size() * sizeof(entries[0]));
    words = on(w, d);
    Tensor rs = Tensor::zeros(DType::I32, {int64_t(c.slots.size())});
    std::memcpy(rs.data(), c.slots.data(), c.slots.size() * 4);
    row_slot = on(rs, d);
  }
  LoraTable table() const { return {.row_slot = &row_slot, .factors = &words, .slot_stride = 3, .rank_cap = kRankCap}; }
};

// Largest |got − want| over the scale of the terms (so 0 terms cannot pass).
struct Check {
  double max_diff = 0, max_term = 0;
  void add(double got, double want, double term) {
    max_diff = std::max(max_diff, std::abs(got - want));
    max_term = std::max(max_term, std::abs(term));
  }
};

void expect_terms(const Check& c, const std::string& what) {
  EXPECT_GT(c.max_term, 0.1) << what << ": the case's terms are too small to test";
  EXPECT_LT(c.max_diff, 2e-3 * std::max(1.0, c.max_term)) << what << " (largest term " << c.max_term << ")";
}

float silu(float g) { return g / (1.0f + std::exp(-g)); }

// The three ops with and without the terms on device d, against the loops.
void check_on(const ProjShape& shape, Device d) {
  const TermsCase c(shape);
  const DeviceTable t(c, d);
  const int64_t n = shape.n, k = shape.k, m = shape.m;
  const Tensor x = from(c.x, n, k, d), norm_w = from(c.norm_w, k, 0, d);
  std::vector<Tensor> w;
  for (const Tensor& wt : c.weights) w.push_back(on(wt, d));
  Tensor normed = zeros(DType::F32, {n, k}, d), u = zeros(DType::F32, {n, 3 * kRankCap}, d);
  const LoraTable table = t.table();
  std::vector<std::vector<float>> xhat;
  for (int64_t r = 0; r < n; ++r) xhat.push_back(c.normed_row(r));

  {  // matmul_group of x̂ into parts 0 and 1
    Tensor y0 = zeros(DType::F32, {n, m}, d), y1 = zeros(DType::F32, {n, m}, d);
    Tensor b0 = zeros(DType::F32, {n, m}, d), b1 = zeros(DType::F32, {n, m}, d);
    const Tensor* ws[] = {&w[0], &w[1]};
    Tensor* ys[] = {&y0, &y1};
    Tensor* bs[] = {&b0, &b1};
    const LoraTablePart parts[] = {{.entry = 0, .y = &y0}, {.entry = 1, .y = &y1}};
    lora_table_shrink(x, {.weight = norm_w, .eps = kEps}, table, parts, u);
    const LoraTerms terms{.table = table, .parts = parts, .u_scratch = u};
    matmul_group(x, {.weight = norm_w, .eps = kEps, .normed = normed}, ws, ys, &terms);
    matmul_group(x, {.weight = norm_w, .eps = kEps, .normed = normed}, ws, bs);
    Check check;
    for (int p = 0; p < 2; ++p) {
      const std::vector<float> got = values(*ys[p]), base = values(*bs[p]);
      for (int64_t r = 0; r < n; ++r) {
        const std::vector<double> term = c.term(r, p, xhat[size_t(r)]);
        for (int64_t col = 0; col < m; ++col)
          check.add(got[size_t(r * m + col)], base[size_t(r * m + col)] + term[size_t(col)], term[size_t(col)]);
      }
    }
    expect_terms(check, "matmul_group");
  }
  {  // swiglu_matmul of x̂: the terms before the SwiGLU
    Tensor out = zeros(DType::F32, {n, m}, d), scratch = zeros(DType::F32, {n, m}, d);
    Tensor g = zeros(DType::F32, {n, m}, d), v = zeros(DType::F32, {n, m}, d);
    const LoraTablePart parts[] = {{.entry = 0, .y = &out}, {.entry = 1, .y = &scratch}};
    lora_table_shrink(x, {.weight = norm_w, .eps = kEps}, table, parts, u);
    const LoraTerms terms{.table = table, .parts = parts, .u_scratch = u};
    swiglu_matmul(x, {.weight = norm_w, .eps = kEps, .normed = normed}, {.gate = w[0], .up = w[1]}, out, scratch,
                  &terms);
    const Tensor* ws[] = {&w[0], &w[1]};
    Tensor* gv[] = {&g, &v};
    matmul_group(x, {.weight = norm_w, .eps = kEps, .normed = normed}, ws, gv);
    const std::vector<float> got = values(out), gate = values(g), up = values(v);
    Check check;
    for (int64_t r = 0; r < n; ++r) {
      const std::vector<double> tg = c.term(r, 0, xhat[size_t(r)]), tu = c.term(r, 1, xhat[size_t(r)]);
      for (int64_t col = 0; col < m; ++col) {
        const size_t i = size_t(r * m + col);
        const float gw = gate[i] + float(tg[size_t(col)]), uw = up[i] + float(tu[size_t(col)]);
        const float want = silu(gw) * uw;
        // The SwiGLU's slope scales the terms' rounding: compare in its units.
        check.add(got[i], want, silu(gw) * uw - silu(gate[i]) * up[i]);
      }
    }
    expect_terms(check, "swiglu_matmul");
  }
  {  // matmul_accumulate of an m-wide input into a residual
    const std::vector<float>& h = c.h;
    const Tensor hin = from(h, n, m, d);
    Tensor y = from(c.residual, n, m, d), base = from(c.residual, n, m, d), scratch = zeros(DType::F32, {n, m}, d);
    const LoraTablePart parts[] = {{.entry = 2, .y = &y}};
    lora_table_shrink(hin, table, parts, u);
    const LoraTerms terms{.table = table, .parts = parts, .u_scratch = u};
    matmul_accumulate(hin, w[2], y, scratch, {.lora = &terms});
    matmul_accumulate(hin, w[2], base, scratch);
    const std::vector<float> got = values(y), want = values(base);
    Check check;
    for (int64_t r = 0; r < n; ++r) {
      const std::vector<float> row(h.begin() + r * m, h.begin() + (r + 1) * m);
      const std::vector<double> term = c.term(r, 2, row);
      for (int64_t col = 0; col < m; ++col)
        check.add(got[size_t(r * m + col)], want[size_t(r * m + col)] + term[size_t(col)], term[size_t(col)]);
    }
    expect_terms(check, "matmul_accumulate");
  }
}

class LoraTermsCpu : public ::testing::TestWithParam<ProjShape> {};
TEST_P(LoraTermsCpu, ProjectionsAddEachRowsTerms) { check_on(GetParam(), Device::CPU); }
INSTANTIATE_TEST_SUITE_P(Shapes, LoraTermsCpu,
                         ::testing::Values(ProjShape{4, 96, 80, DType::F32}, ProjShape{7, 128, 64, DType::Q8_0}),
                         [](const auto& info) { return info.param.name(); });

// On CUDA: the streamed GEMV (≥ 8 MB of 16-bit weights, up to 4 rows),
// which adds the terms itself, and the expand kernel after the warp-per-row
// GEMV (small launches, f32), the quantized GEMVs, the streamed GEMV of 5–8
// rows and the GEMMs (more than 8 rows).
class CudaLoraTerms : public ::testing::TestWithParam<ProjShape> {};
TEST_P(CudaLoraTerms, ProjectionsAddEachRowsTerms) {
  if (!cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  check_on(GetParam(), Device::CUDA);
}
INSTANTIATE_TEST_SUITE_P(Shapes, CudaLoraTerms,
                         ::testing::Values(ProjShape{1, 256, 96, DType::BF16}, ProjShape{5, 256, 96, DType::BF16},
                                           ProjShape{1, 2048, 2048, DType::BF16}, ProjShape{3, 2048, 2048, DType::F16},
                                           ProjShape{6, 2048, 2048, DType::BF16}, ProjShape{2, 128, 64, DType::F32},
                                           ProjShape{1, 256, 96, DType::Q8_0}, ProjShape{12, 256, 96, DType::BF16}),
                         [](const auto& info) { return info.param.name(); });

TEST(LoraTerms, RefusesTermsOfOtherOutputs) {
  const TermsCase c(ProjShape{2, 32, 16, DType::F32});
  const DeviceTable t(c, Device::CPU);
  const Tensor x = from(c.x, 2, 32, Device::CPU);
  Tensor y = Tensor::zeros(DType::F32, {2, 16}), other = Tensor::zeros(DType::F32, {2, 16});
  Tensor scratch = Tensor::zeros(DType::F32, {2, 16}), u = Tensor::zeros(DType::F32, {2, 3 * kRankCap});
  const Tensor h = Tensor::zeros(DType::F32, {2, 16});
  const LoraTablePart parts[] = {{.entry = 2, .y = &other}};
  const LoraTerms terms{.table = t.table(), .parts = parts, .u_scratch = u};
  EXPECT_THROW(matmul_accumulate(h, c.weights[2], y, scratch, {.lora = &terms}), Error);
}

}  // namespace
}  // namespace brioche::ops
