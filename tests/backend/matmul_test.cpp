// Op harness for cpu::matmul: every weight dtype x batch sizes x odd output
// sizes, on every instruction-set path this CPU has, against a double-precision
// reference computed from the dequantized weights.
//
// Tolerances (stated, not tuned per case):
//  * f32/f16/bf16 weights: f32 FMA accumulation; per output
//      |y - ref| <= 1e-5 * ||w_row|| * ||x_row||
//  * quantized weights (SIMD paths): activations are rounded to int8 per
//    32-block (error <= max|x_block|/254 per element), so per output
//      |y - ref| <= 1e-2 * ||w_row|| * ||x_row||   (Cauchy-Schwarz bound of that rounding)
//    and, over each matrix with >= 32 outputs and >= 3 activation rows,
//    NMSE = Σ(y-ref)²/Σref² < 5e-4 (gaussian x, measured 2e-5..2.5e-4; with
//    n=1 every output shares one x row and the ratio is too noisy to bound). Against a reference that rounds x to int8
//    the same way, the error is f32 rounding only: <= 1e-5 * ||w_row|| * ||x_row||.
//  * every SIMD path agrees with the AVX2 path to 1e-5 * ||w_row|| * ||x_row||
//    (same integer dots, different float summation order).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_ref.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/matmul.h"

namespace brioche::cpu {
namespace {

constexpr DType kAllWeightTypes[] = {
    DType::F32,         DType::F16,          DType::BF16,        DType::Q8_0,        DType::Q4_0,
    DType::Q4_1,        DType::Q4_K,         DType::Q5_K,        DType::Q6_K,        DType::AFFINE4_G32,
    DType::AFFINE4_G64, DType::AFFINE4_G128, DType::AFFINE8_G32, DType::AFFINE8_G64, DType::AFFINE8_G128,
};

struct Problem {
  DType wtype;
  int64_t n, m, k;
  std::vector<uint8_t> w;      // [m, row_bytes]
  std::vector<float> wf;       // [m, k] dequantized
  std::vector<float> x;        // [n, k]
  std::vector<double> ref;     // [n, m]
  std::vector<double> ref_q8;  // [n, m] with x rounded to int8 per 32-block as the kernels do
  std::vector<double> scale;   // [n, m]: ||w_r|| * ||x_c||
};

Problem make_problem(DType wtype, int64_t n, int64_t m, int64_t k, uint32_t seed) {
  Problem p{wtype, n, m, k, {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  const size_t rb = row_bytes(wtype, k);
  p.w.resize(rb * size_t(m));
  p.wf.resize(size_t(m * k));
  std::vector<float> src(static_cast<size_t>(k));
  for (int64_t r = 0; r < m; ++r) {
    // A per-row offset exercises the min/bias terms of the quantized formats.
    const float offset = (r % 3 == 0) ? 0.3f : 0.0f;
    for (auto& v : src) v = gauss(rng) * 0.05f + offset;
    quantize_row_ref(wtype, src.data(), p.w.data() + r * rb, k);
    dequantize_row_ref(wtype, p.w.data() + r * rb, p.wf.data() + r * k, k);
  }
  p.x.resize(size_t(n * k));
  for (int64_t i = 0; i < n * k; ++i) p.x[size_t(i)] = gauss(rng);
  // x as the int8 activation path sees it: per 32 elements d = max|x|/127, round(x/d)*d.
  std::vector<double> xq(p.x.size());
  for (size_t b = 0; b + 32 <= p.x.size(); b += 32) {
    float amax = 0;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(p.x[b + i]));
    const float d = amax / 127.0f, id = amax != 0 ? 127.0f / amax : 0.0f;
    for (size_t i = 0; i < 32; ++i) xq[b + i] = double(std::roundf(p.x[b + i] * id)) * d;
  }
  p.ref.resize(size_t(n * m));
  p.ref_q8.resize(size_t(n * m));
  p.scale.resize(size_t(n * m));
  for (int64_t c = 0; c < n; ++c) {
    double xn = 0;
    for (int64_t i = 0; i < k; ++i) xn += double(p.x[c * k + i]) * p.x[c * k + i];
    for (int64_t r = 0; r < m; ++r) {
      double s = 0, sq = 0, wn = 0;
      for (int64_t i = 0; i < k; ++i) {
        s += double(p.wf[r * k + i]) * double(p.x[c * k + i]);
        if (k % 32 == 0) sq += double(p.wf[r * k + i]) * xq[size_t(c * k + i)];
        wn += double(p.wf[r * k + i]) * p.wf[r * k + i];
      }
      p.ref[c * m + r] = s;
      p.ref_q8[c * m + r] = sq;
      p.scale[c * m + r] = std::sqrt(wn * xn) + 1e-30;
    }
  }
  return p;
}

// Runs cpu::matmul with guard sentinels around y and padding between its rows.
std::vector<float> run(const Problem& p) {
  constexpr int64_t kGuard = 16, kRowPad = 3;
  const int64_t ldy = p.m + kRowPad;
  const float sentinel = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> buf(size_t(2 * kGuard + p.n * ldy), sentinel);
  float* y = buf.data() + kGuard;
  matmul({.x = p.x.data(),
          .ldx = p.k,
          .wtype = p.wtype,
          .w = p.w.data(),
          .w_row_bytes = row_bytes(p.wtype, p.k),
          .y = y,
          .ldy = ldy,
          .n = p.n,
          .m = p.m,
          .k = p.k});
  std::vector<float> out(size_t(p.n * p.m));
  for (int64_t i = 0; i < int64_t(buf.size()); ++i) {
    const int64_t rel = i - kGuard;
    const bool inside = rel >= 0 && rel < p.n * ldy && rel % ldy < p.m;
    if (inside) {
      EXPECT_TRUE(std::isfinite(buf[size_t(i)])) << "non-finite output at " << rel;
      out[size_t(rel / ldy * p.m + rel % ldy)] = buf[size_t(i)];
    } else {
      uint32_t bits, want;
      std::memcpy(&bits, &buf[size_t(i)], 4);
      std::memcpy(&want, &sentinel, 4);
      EXPECT_EQ(bits, want) << "matmul wrote outside y at offset " << rel;
    }
  }
  return out;
}

std::vector<int64_t> ks_for(DType t) {
  const int be = dtype_info(t).block_elems;
  if (be == 1) return {37, 64};      // f32/f16/bf16: tails and full vectors
  if (be == 256) return {256, 768};  // K-quants: 1 and 3 super-blocks
  if (be == 32) return {96, 576};    // odd block counts (3, 18)
  return {be, 3 * be};               // affine g64/g128
}

class MatmulHarness : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulHarness, MatchesDoubleReferenceOnEveryIsa) {
  const DType wtype = GetParam();
  const bool quantized = dtype_info(wtype).quantized;
  uint32_t seed = 1;
  for (int64_t k : ks_for(wtype)) {
    for (int64_t n : {1, 3, 17, 64}) {
      for (int64_t m : {1, 7, 33, 577}) {
        const Problem p = make_problem(wtype, n, m, k, seed++);
        std::vector<float> avx2_out;
        for (Isa isa : available_isas()) {
          set_isa_override(isa);
          const std::vector<float> y = run(p);
          clear_isa_override();
          const bool int8_acts = quantized && isa != Isa::Scalar;
          const double per_output = int8_acts ? 1e-2 : 1e-5;
          double err2 = 0, ref2 = 0;
          for (size_t i = 0; i < y.size(); ++i) {
            const double e = double(y[i]) - p.ref[i];
            err2 += e * e;
            ref2 += p.ref[i] * p.ref[i];
            ASSERT_LE(std::fabs(e), per_output * p.scale[i])
                << dtype_name(wtype) << " " << isa_name(isa) << " n=" << n << " m=" << m << " k=" << k << " output "
                << i << " got " << y[i] << " want " << p.ref[i];
            if (int8_acts) {  // the integer math itself is exact: only f32 rounding remains
              ASSERT_LE(std::fabs(double(y[i]) - p.ref_q8[i]), 1e-5 * p.scale[i])
                  << dtype_name(wtype) << " " << isa_name(isa) << " n=" << n << " m=" << m << " k=" << k << " output "
                  << i << " vs int8-activation reference";
            }
          }
          if (y.size() >= 32 && n >= 3) {
            EXPECT_LT(err2 / ref2, int8_acts ? 5e-4 : 1e-10)
                << dtype_name(wtype) << " " << isa_name(isa) << " n=" << n << " m=" << m << " k=" << k;
          }
          if (isa == Isa::Avx2) avx2_out = y;
          if (isa > Isa::Avx2) {
            for (size_t i = 0; i < y.size(); ++i)
              ASSERT_LE(std::fabs(double(y[i]) - avx2_out[i]), 1e-5 * p.scale[i])
                  << dtype_name(wtype) << " " << isa_name(isa) << " vs avx2, n=" << n << " m=" << m << " k=" << k
                  << " output " << i;
          }
        }
      }
    }
  }
}

// Quantized weights of the column-kernel types go through the few-row kernel
// (n <= 3: 8 weight rows per vector, a vphaddd tree of block dots) or the
// column kernels (n >= 4: 16 activation rows per vector, padded groups,
// 12-row (AVX-512) or 4-row weight tiles with a row tail, vectorized Q4_1 and
// Q8_0 decoders with a block tail); see matmul_columns.inc. Q6_K keeps the row
// kernels. Every n from 1 to 17 plus 33 and 64, block counts 3, 5 and 18, and
// weight rows 13 and 40 (full tiles plus tail rows), against the reference
// with the same int8 activations: only f32 rounding may differ.
TEST(MatmulColumns, EveryBatchSizeMatchesInt8Reference) {
  const DType types[] = {DType::Q4_1, DType::Q8_0, DType::Q4_0,        DType::Q4_K,
                         DType::Q5_K, DType::Q6_K, DType::AFFINE4_G64, DType::AFFINE8_G32};
  std::vector<int64_t> batch_sizes;
  for (int64_t n = 1; n <= 17; ++n) batch_sizes.push_back(n);
  batch_sizes.push_back(33);
  batch_sizes.push_back(64);
  uint32_t seed = 100;
  for (DType wtype : types) {
    const int64_t be = dtype_info(wtype).block_elems;
    const std::vector<int64_t> ks = be == 32 ? std::vector<int64_t>{96, 160, 576} : std::vector<int64_t>{be, 2 * be};
    for (int64_t k : ks) {
      for (int64_t m : {13, 40}) {
        for (int64_t n : batch_sizes) {
          if (m == 40 && n != 16 && n != 17 && n != 64) continue;  // keep the test quick
          const Problem p = make_problem(wtype, n, m, k, seed++);
          for (Isa isa : available_isas()) {
            if (isa == Isa::Scalar) continue;
            set_isa_override(isa);
            const std::vector<float> y = run(p);
            clear_isa_override();
            for (size_t i = 0; i < y.size(); ++i)
              ASSERT_LE(std::fabs(double(y[i]) - p.ref_q8[i]), 1e-5 * p.scale[i])
                  << dtype_name(wtype) << " " << isa_name(isa) << " n=" << n << " m=" << m << " k=" << k << " output "
                  << i << " (row " << i / size_t(m) << ") got " << y[i] << " want " << p.ref_q8[i];
          }
        }
      }
    }
  }
}

// A sequence's outputs must not depend on what it is batched with (the
// engine's seeded requests give the same tokens alone and batched): the
// few-row kernel (n <= 3) and the column kernels (n >= 4, 16 rows per vector,
// 8-lane tails) do the same float arithmetic per output, so every row of a
// batch equals that row computed alone, bit for bit, on every path.
TEST(MatmulColumns, RowsAreBitIdenticalAloneAndBatched) {
  const DType types[] = {DType::Q4_1, DType::Q8_0, DType::Q4_0,        DType::Q4_K,
                         DType::Q5_K, DType::Q6_K, DType::AFFINE4_G32, DType::AFFINE8_G64};
  uint32_t seed = 500;
  for (DType wtype : types) {
    const int64_t be = dtype_info(wtype).block_elems;
    const int64_t k = be == 32 ? 160 : 2 * be, m = 21;
    for (int64_t n : {2, 3, 4, 9, 16, 17, 40}) {
      const Problem batch = make_problem(wtype, n, m, k, seed++);
      for (Isa isa : available_isas()) {
        if (isa == Isa::Scalar) continue;
        set_isa_override(isa);
        const std::vector<float> together = run(batch);
        for (int64_t c = 0; c < n; ++c) {
          Problem alone = batch;
          alone.n = 1;
          alone.x.assign(batch.x.begin() + c * k, batch.x.begin() + (c + 1) * k);
          const std::vector<float> y = run(alone);
          for (int64_t r = 0; r < m; ++r) {
            uint32_t a, b;
            std::memcpy(&a, &y[size_t(r)], 4);
            std::memcpy(&b, &together[size_t(c * m + r)], 4);
            ASSERT_EQ(a, b) << dtype_name(wtype) << " " << isa_name(isa) << " n=" << n << " row " << c << " output "
                            << r << ": alone " << y[size_t(r)] << ", batched " << together[size_t(c * m + r)];
          }
        }
        clear_isa_override();
      }
    }
  }
}

// matmul_group quantizes the shared x once and splits every part's weight
// rows in one dispatch: each part's output must be bit-identical to its own
// matmul() (what keeps a sequence's logits the same alone and batched), and
// nothing outside each part's y may be written. Parts of mixed dtypes take
// the per-part fallback.
TEST(MatmulGroup, EachPartIsBitIdenticalToItsOwnMatmul) {
  const std::vector<std::vector<DType>> groups = {{DType::Q4_1, DType::Q4_1, DType::Q4_1},
                                                  {DType::Q8_0, DType::Q8_0},
                                                  {DType::Q4_K, DType::Q4_K, DType::Q4_K},
                                                  {DType::Q6_K, DType::Q6_K},
                                                  {DType::Q4_1, DType::Q8_0},
                                                  {DType::F32, DType::F32}};
  const int64_t part_rows[] = {300, 21, 70};
  uint32_t seed = 900;
  for (const std::vector<DType>& types : groups) {
    const int64_t k = dtype_info(types[0]).block_elems == 32 ? 192 : 512;
    for (int64_t n : {1, 2, 3, 4, 16, 17, 40}) {
      std::vector<Problem> problems;
      for (size_t i = 0; i < types.size(); ++i) {
        problems.push_back(make_problem(types[i], n, part_rows[i], k, seed++));
        problems[i].x = problems[0].x;  // the same values (the group reads problems[0]'s copy)
      }
      for (Isa isa : available_isas()) {
        set_isa_override(isa);
        constexpr int64_t kGuard = 16;
        std::vector<std::vector<float>> bufs;
        std::vector<MatmulArgs> parts;
        for (const Problem& p : problems) {
          bufs.emplace_back(size_t(2 * kGuard + p.n * (p.m + 1)), -7.0f);
          parts.push_back({.x = problems[0].x.data(),
                           .ldx = p.k,
                           .wtype = p.wtype,
                           .w = p.w.data(),
                           .w_row_bytes = row_bytes(p.wtype, p.k),
                           .y = bufs.back().data() + kGuard,
                           .ldy = p.m + 1,
                           .n = p.n,
                           .m = p.m,
                           .k = p.k});
        }
        // With a read-ahead (read_ahead.h): requests only, so the same bits.
        const ByteRange read_ahead[] = {{.data = problems[0].w.data() + 3, .bytes = 1000},
                                        {.data = problems[0].x.data(), .bytes = 0},
                                        {.data = problems.back().w.data(), .bytes = problems.back().w.size()}};
        matmul_group(parts, read_ahead);
        for (size_t i = 0; i < problems.size(); ++i) {
          const Problem& p = problems[i];
          const std::vector<float> alone = run(p);
          for (int64_t j = 0; j < int64_t(bufs[i].size()); ++j) {
            const int64_t rel = j - kGuard;
            const bool inside = rel >= 0 && rel < p.n * (p.m + 1) && rel % (p.m + 1) < p.m;
            const float got = bufs[i][size_t(j)];
            if (!inside) {
              ASSERT_EQ(got, -7.0f) << "write outside part " << i << " at " << rel;
              continue;
            }
            const float want = alone[size_t(rel / (p.m + 1) * p.m + rel % (p.m + 1))];
            uint32_t a, b;
            std::memcpy(&a, &got, 4);
            std::memcpy(&b, &want, 4);
            ASSERT_EQ(a, b) << dtype_name(p.wtype) << " " << isa_name(isa) << " n=" << n << " part " << i << " at "
                            << rel << ": group " << got << ", alone " << want;
          }
        }
        clear_isa_override();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MatmulHarness, ::testing::ValuesIn(kAllWeightTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CpuFeatures, ThisMachineHasTheWidePathsItAdvertises) {
  auto isas = available_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::Scalar);
  // Visible record of what the harness above covered on this machine.
  std::string names;
  for (Isa isa : isas) names += std::string(isa_name(isa)) + " ";
  std::printf("matmul ISA paths tested: %s\n", names.c_str());
}

TEST(MatmulOp, TensorApiChecksShapesAndDevice) {
  Tensor x = Tensor::zeros(DType::F32, {2, 64});
  Tensor w = Tensor::zeros(DType::Q4_1, {5, 64});
  Tensor y = Tensor::zeros(DType::F32, {2, 5});
  EXPECT_NO_THROW(ops::matmul(x, w, y));
  Tensor bad_w = Tensor::zeros(DType::Q4_1, {5, 96});
  EXPECT_THROW(ops::matmul(x, bad_w, y), Error);
  Tensor bad_y = Tensor::zeros(DType::F32, {2, 6});
  EXPECT_THROW(ops::matmul(x, w, bad_y), Error);
  Tensor cuda_w = Tensor::view(w.data(), DType::Q4_1, {5, 64}, nullptr, Device::CUDA);
  try {
    ops::matmul(x, cuda_w, y);
    FAIL() << "expected an error for a CUDA weight";
  } catch (const Error& e) {
    // Without CUDA: "is on CUDA but the CUDA backend is not built"; with it,
    // the devices named: "got x on cpu, w on cuda, y on cpu".
    const std::string message = e.what();
    EXPECT_TRUE(message.find("is on CUDA") != std::string::npos || message.find("w on cuda") != std::string::npos)
        << message;
  }
}

TEST(MatmulOp, TensorApiMatchesBackendOnStridedViews) {
  // x is a column-offset view is not allowed (rows must be contiguous), but a
  // row slice of a larger buffer is: exercise ldx/ldy != k/m via slices.
  Problem p = make_problem(DType::Q8_0, 4, 9, 64, 99);
  Tensor x = Tensor::zeros(DType::F32, {6, 64});
  std::memcpy(x.data(), p.x.data(), p.x.size() * 4);
  Tensor w = Tensor::view(p.w.data(), DType::Q8_0, {9, 64}, nullptr);
  Tensor y = Tensor::zeros(DType::F32, {4, 9});
  ops::matmul(x.slice(0, 0, 4), w, y);
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t r = 0; r < 9; ++r)
      EXPECT_NEAR(y.row_as<float>(c)[r], p.ref[size_t(c * 9 + r)], 1e-2 * p.scale[size_t(c * 9 + r)]);
}

}  // namespace
}  // namespace brioche::cpu
