// ops::lora_rows_add_group: several projections of one x in one call (the
// CPU serves Q/K/V and gate/up this way) give each projection exactly what
// its own lora_rows_add gives, and both match a double-precision reference,
// on every instruction set this CPU runs (the AVX2 and AVX-512 kernels),
// with f16 factors and with Q8_0 ones by block column.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "ops/lora_rows.h"

namespace brioche::train {
namespace {

Tensor random_tensor(DType dtype, int64_t rows, int64_t cols, float scale, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, scale);
  Tensor t = Tensor::zeros(dtype, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (dtype == DType::F16) {
      t.data_as<uint16_t>()[i] = f32_to_f16(dist(rng));
    } else {
      t.data_as<float>()[i] = dist(rng);
    }
  }
  return t;
}

struct Factors {
  Tensor a, bt;
};

// Element [k, c] of a factor: f16 [rank, n], or Q8_0 by block column as
// ops/lora_rows.h lays it out (row c/32 holds block k of every factor row:
// an f16 scale d, then 32 int8 q; the value is d·q).
double factor_value(const Tensor& f, int64_t k, int64_t c) {
  if (f.dtype() == DType::F16) return f16_to_f32(f.row_as<uint16_t>(k)[c]);
  const auto* block = static_cast<const uint8_t*>(f.row_ptr(c / 32)) + k * 34;
  uint16_t d;
  std::memcpy(&d, block, 2);
  return double(f16_to_f32(d)) * double(reinterpret_cast<const int8_t*>(block + 2)[c % 32]);
}
int64_t factor_rank(const Tensor& f) { return f.dtype() == DType::F16 ? f.dim(0) : f.dim(1) / 32; }

// y[r] + (x[r]·Aᵀ)·bt in double for the segments' rows, y elsewhere.
std::vector<double> reference(const Tensor& x, std::span<const ops::LoraRows> segs, const Tensor& y) {
  const int64_t in = x.dim(1), out = y.dim(1);
  std::vector<double> want(size_t(y.dim(0) * out));
  for (int64_t i = 0; i < y.dim(0) * out; ++i) want[size_t(i)] = y.data_as<float>()[i];
  for (const ops::LoraRows& s : segs) {
    const int64_t rank = factor_rank(*s.a);
    for (int32_t r = s.first_row; r < s.first_row + s.n_rows; ++r) {
      std::vector<double> u(size_t(rank), 0.0);
      for (int64_t k = 0; k < rank; ++k)
        for (int64_t c = 0; c < in; ++c) u[size_t(k)] += factor_value(*s.a, k, c) * x.data_as<float>()[r * in + c];
      for (int64_t c = 0; c < out; ++c)
        for (int64_t k = 0; k < rank; ++k) want[size_t(r * out + c)] += u[size_t(k)] * factor_value(*s.bt, k, c);
    }
  }
  return want;
}

// rows: the batch; the segments put 2 rows on each of 8 adapters (a decode
// step of 16 streams), part 1 skips adapter 3, part 2 takes adapter 0 on
// every row. only_last: parts 0 and 1 without adapters (an adapter of
// up_proj but not gate_proj), so the group is one projection.
void check_group(int64_t rows, bool only_last = false, bool q8_0 = false) {
  std::mt19937 rng(7);
  constexpr int64_t kIn = 576, kRank = 8;
  const int64_t outs[3] = {576, 192, 1536};
  Tensor x = random_tensor(DType::F32, rows, kIn, 1.0f, rng);
  std::vector<Factors> factors[3];
  std::vector<ops::LoraRows> segs[3];
  for (int p = 0; p < 3; ++p) {
    for (int g = 0; g < 8; ++g) {
      factors[p].push_back(
          {random_tensor(DType::F16, kRank, kIn, 0.05f, rng), random_tensor(DType::F16, kRank, outs[p], 0.05f, rng)});
      if (q8_0)
        factors[p].back() = {ops::lora_factor_q8_0(factors[p].back().a), ops::lora_factor_q8_0(factors[p].back().bt)};
    }
    for (int g = 0; g < 8 && 2 * g + 2 <= rows; ++g) {
      if ((p == 1 && g == 3) || p == 2 || only_last) continue;
      segs[p].push_back(
          {.first_row = 2 * g, .n_rows = 2, .a = &factors[p][size_t(g)].a, .bt = &factors[p][size_t(g)].bt});
    }
  }
  segs[2].push_back({.first_row = 0, .n_rows = int32_t(rows), .a = &factors[2][0].a, .bt = &factors[2][0].bt});
  Tensor u = Tensor::zeros(DType::F32, {rows, kRank});
  Tensor y_group[3], y_each[3];
  std::vector<ops::LoraRowsPart> parts;
  for (int p = 0; p < 3; ++p) {
    y_group[p] = random_tensor(DType::F32, rows, outs[p], 1.0f, rng);
    y_each[p] = Tensor::zeros(DType::F32, {rows, outs[p]});
    for (int64_t i = 0; i < rows * outs[p]; ++i) y_each[p].data_as<float>()[i] = y_group[p].data_as<float>()[i];
    parts.push_back({.segments = segs[p], .y = &y_group[p]});
  }
  std::vector<double> want[3];
  for (int p = 0; p < 3; ++p) want[p] = reference(x, segs[p], y_each[p]);
  ops::lora_rows_add_group(x, parts, u);
  for (int p = 0; p < 3; ++p) {
    ops::lora_rows_add(x, segs[p], y_each[p], u);
    for (int64_t i = 0; i < rows * outs[p]; ++i) {
      const float got = y_group[p].data_as<float>()[i];
      ASSERT_EQ(got, y_each[p].data_as<float>()[i]) << "part " << p << " element " << i;
      ASSERT_NEAR(got, want[p][size_t(i)], 1e-4 * (1.0 + std::fabs(want[p][size_t(i)])))
          << "part " << p << " element " << i;
    }
  }
}

// Runs fn once on each instruction set the CPU has (the kernels follow
// cpu::active_isa()), naming it on failure.
template <typename Fn>
void on_every_isa(Fn&& fn) {
  for (const cpu::Isa isa : cpu::available_isas()) {
    SCOPED_TRACE(std::string(cpu::isa_name(isa)));
    cpu::set_isa_override(isa);
    fn();
    cpu::clear_isa_override();
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(LoraRowsAddGroup, DecodeBatchOfEightAdaptersEqualsOneCallPerProjection) {
  on_every_isa([] { check_group(16); });
}

TEST(LoraRowsAddGroup, FewRowsRunOnTheCallingThreadAndEqualOneCallPerProjection) {
  on_every_isa([] { check_group(2); });
}

// A prompt of 24 rows on one adapter: 3 blocks of much work, a single part
// whose u the group does not keep (this crashed the server once).
TEST(LoraRowsAddGroup, OneAdaptedProjectionOfAPromptEqualsItsOwnCall) {
  on_every_isa([] { check_group(24, true); });
}

// Shapes off every vector width: in and out not multiples of 8 or 16 (the
// kernels' masked or scalar tails), ranks that leave partial groups of
// factor rows (1, 3, 5, 11), and segments of 1 to 5 rows (row groups of 1
// to 4), against the double reference.
TEST(LoraRowsAdd, OddShapesMatchTheReferenceOnEveryIsa) {
  std::mt19937 rng(11);
  struct Shape {
    int64_t in, out;
    int64_t rank;
  };
  const Shape shapes[] = {{37, 53, 3}, {16, 16, 1}, {100, 70, 5}, {200, 9, 11}, {8, 300, 8}};
  for (const Shape& shape : shapes) {
    SCOPED_TRACE("in " + std::to_string(shape.in) + " out " + std::to_string(shape.out) + " rank " +
                 std::to_string(shape.rank));
    constexpr int64_t kRows = 15;
    const Tensor x = random_tensor(DType::F32, kRows, shape.in, 1.0f, rng);
    const Tensor y0 = random_tensor(DType::F32, kRows, shape.out, 1.0f, rng);
    std::vector<Factors> factors;
    for (int g = 0; g < 5; ++g)
      factors.push_back({random_tensor(DType::F16, shape.rank, shape.in, 0.1f, rng),
                         random_tensor(DType::F16, shape.rank, shape.out, 0.1f, rng)});
    // rows 0..14: adapter g on g + 1 rows (1, 2, 3, 4, 5 rows), row 14's segment of 5 ends the batch
    std::vector<ops::LoraRows> segs;
    for (int32_t g = 0, row = 0; g < 5; row += g + 1, ++g)
      segs.push_back({.first_row = row, .n_rows = g + 1, .a = &factors[size_t(g)].a, .bt = &factors[size_t(g)].bt});
    const std::vector<double> want = reference(x, segs, y0);
    on_every_isa([&] {
      Tensor y = Tensor::zeros(DType::F32, {kRows, shape.out});
      std::copy_n(y0.data_as<float>(), kRows * shape.out, y.data_as<float>());
      Tensor u = Tensor::zeros(DType::F32, {kRows, shape.rank});
      ops::lora_rows_add(x, segs, y, u);
      for (int64_t i = 0; i < kRows * shape.out; ++i)
        ASSERT_NEAR(y.data_as<float>()[i], want[size_t(i)], 1e-4 * (1.0 + std::fabs(want[size_t(i)])))
            << "element " << i;
    });
  }
}

// Q8_0 factors by block column (what a CPU server of a quantized model
// holds): the group equals one call per projection, and both the double
// reference of the dequantized factors, at a decode batch and a prompt.
TEST(LoraRowsAddGroup, Q8FactorsEqualOneCallPerProjection) {
  on_every_isa([] {
    check_group(16, false, true);
    check_group(24, true, true);
  });
}

// pack_in_order: the same bytes, shapes and dtypes, now one after another
// from 64-byte boundaries in the order given (what a step's tasks read as
// one stream), and the originals untouched.
TEST(LoraRowsPack, FactorsKeepTheirBytesInOneBufferInTheOrderGiven) {
  std::mt19937 rng(5);
  const Tensor f16 = random_tensor(DType::F16, 8, 576, 0.1f, rng);
  const Tensor q8_a = ops::lora_factor_q8_0(f16),
               q8_b = ops::lora_factor_q8_0(random_tensor(DType::F16, 3, 96, 0.1f, rng));
  const Tensor originals[] = {q8_b, f16, q8_a};
  Tensor packed[] = {q8_b, f16, q8_a};
  Tensor* order[] = {&packed[0], &packed[1], &packed[2]};
  ops::pack_in_order(order);
  size_t expected_offset = 0;
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(packed[i].dtype(), originals[i].dtype());
    EXPECT_EQ(packed[i].shape(), originals[i].shape());
    EXPECT_TRUE(packed[i].is_contiguous());
    ASSERT_EQ(packed[i].nbytes(), originals[i].nbytes());
    EXPECT_NE(packed[i].data(), originals[i].data());
    EXPECT_EQ(std::memcmp(packed[i].data(), originals[i].data(), originals[i].nbytes()), 0);
    EXPECT_EQ(static_cast<const char*>(packed[i].data()) - static_cast<const char*>(packed[0].data()),
              ptrdiff_t(expected_offset));
    expected_offset += (originals[i].nbytes() + 63) / 64 * 64;
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(packed[0].data()) % 64, 0u);
}

// Q8_0 factors at shapes of whole blocks with ranks that leave partial
// groups of factor rows and segments of 1 to 5 rows, one segment's factors
// in f16 beside the others' (each segment takes its own format): against
// the double reference of the values the factors hold, and within Q8_0's
// rounding of the same factors in f16.
TEST(LoraRowsAdd, Q8FactorsMatchTheReferenceAndTheirF16OnEveryIsa) {
  std::mt19937 rng(13);
  struct Shape {
    int64_t in, out;
    int64_t rank;
  };
  const Shape shapes[] = {{576, 192, 8}, {32, 64, 1}, {96, 1536, 5}, {1536, 576, 16}, {160, 96, 11}};
  for (const Shape& shape : shapes) {
    SCOPED_TRACE("in " + std::to_string(shape.in) + " out " + std::to_string(shape.out) + " rank " +
                 std::to_string(shape.rank));
    constexpr int64_t kRows = 15;
    const Tensor x = random_tensor(DType::F32, kRows, shape.in, 1.0f, rng);
    const Tensor y0 = random_tensor(DType::F32, kRows, shape.out, 1.0f, rng);
    std::vector<Factors> f16, q8;
    for (int g = 0; g < 5; ++g) {
      f16.push_back({random_tensor(DType::F16, shape.rank, shape.in, 0.1f, rng),
                     random_tensor(DType::F16, shape.rank, shape.out, 0.1f, rng)});
      q8.push_back(g == 2 ? f16.back()
                          : Factors{ops::lora_factor_q8_0(f16.back().a), ops::lora_factor_q8_0(f16.back().bt)});
    }
    std::vector<ops::LoraRows> segs_q8, segs_f16;
    for (int32_t g = 0, row = 0; g < 5; row += g + 1, ++g) {
      segs_q8.push_back({.first_row = row, .n_rows = g + 1, .a = &q8[size_t(g)].a, .bt = &q8[size_t(g)].bt});
      segs_f16.push_back({.first_row = row, .n_rows = g + 1, .a = &f16[size_t(g)].a, .bt = &f16[size_t(g)].bt});
    }
    const std::vector<double> want = reference(x, segs_q8, y0), want_f16 = reference(x, segs_f16, y0);
    // Q8_0 rounds each value by up to half its block's step (max|block|/254):
    // a few tenths of a percent of the low-rank term, which is at most
    // √in·0.1·√rank·0.1·√rank in size here.
    double term_rms = 0.0;
    for (size_t i = 0; i < want_f16.size(); ++i) {
      const double term = want_f16[i] - y0.data_as<float>()[i];
      term_rms += term * term;
    }
    term_rms = std::sqrt(term_rms / double(want_f16.size()));
    on_every_isa([&] {
      Tensor y = Tensor::zeros(DType::F32, {kRows, shape.out});
      std::copy_n(y0.data_as<float>(), kRows * shape.out, y.data_as<float>());
      Tensor u = Tensor::zeros(DType::F32, {kRows, shape.rank});
      ops::lora_rows_add(x, segs_q8, y, u);
      double err_rms = 0.0;
      for (int64_t i = 0; i < kRows * shape.out; ++i) {
        ASSERT_NEAR(y.data_as<float>()[i], want[size_t(i)], 1e-4 * (1.0 + std::fabs(want[size_t(i)])))
            << "element " << i;
        const double err = y.data_as<float>()[i] - want_f16[size_t(i)];
        err_rms += err * err;
      }
      err_rms = std::sqrt(err_rms / double(kRows * shape.out));
      EXPECT_LT(err_rms, 0.02 * term_rms) << "Q8_0 against f16: rms error " << err_rms << ", term rms " << term_rms;
      EXPECT_GT(err_rms, 0.0) << "the Q8_0 factors were not used";
    });
  }
}

TEST(LoraRowsAdd, Q8FactorsNeedWholeBlocksOnTheCpu) {
  Tensor f = Tensor::zeros(DType::F16, {4, 40});
  EXPECT_THROW(ops::lora_factor_q8_0(f), Error);
  const Tensor q = ops::lora_factor_q8_0(Tensor::zeros(DType::F16, {4, 64}));
  EXPECT_EQ(q.dtype(), DType::Q8_0);
  EXPECT_EQ(q.dim(0), 2);
  EXPECT_EQ(q.dim(1), 4 * 32);
}

// lora_rows_read_ahead: a segment's A and bt that pack_in_order laid out
// one after the other make one range (A's first byte to bt's last), factors
// that do not meet in the order read one range each; with less storage
// than that, the first ranges and nothing past the storage.
TEST(LoraRowsReadAhead, FactorsThatMeetMakeOneRangeAndTheStorageBoundsTheRanges) {
  std::mt19937 rng(21);
  std::vector<Factors> f;
  for (int g = 0; g < 2; ++g)
    f.push_back({ops::lora_factor_q8_0(random_tensor(DType::F16, 3, 64, 0.1f, rng)),
                 ops::lora_factor_q8_0(random_tensor(DType::F16, 3, 32, 0.1f, rng))});
  // Adapter 0 in the order read; adapter 1's bt before its A, so they never meet.
  Tensor* order[] = {&f[0].a, &f[0].bt, &f[1].bt, &f[1].a};
  ops::pack_in_order(order);
  const ops::LoraRows segs[] = {{.first_row = 0, .n_rows = 1, .a = &f[0].a, .bt = &f[0].bt},
                                {.first_row = 1, .n_rows = 1, .a = &f[1].a, .bt = &f[1].bt}};
  Tensor y = Tensor::zeros(DType::F32, {2, 32});
  const ops::LoraRowsPart parts[] = {{segs, &y}};
  const auto end = [](const auto& r) { return static_cast<const char*>(r.data) + r.bytes; };
  const auto tensor_end = [](const Tensor& t) { return static_cast<const char*>(t.data()) + t.nbytes(); };

  std::array<cpu::ByteRange, 4> storage;
  const std::span<const cpu::ByteRange> ranges = ops::lora_rows_read_ahead(parts, storage);
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges.data(), storage.data());
  EXPECT_EQ(ranges[0].data, f[0].a.data());
  EXPECT_EQ(end(ranges[0]), tensor_end(f[0].bt));
  EXPECT_EQ(ranges[1].data, f[1].a.data());
  EXPECT_EQ(end(ranges[1]), tensor_end(f[1].a));
  EXPECT_EQ(ranges[2].data, f[1].bt.data());
  EXPECT_EQ(end(ranges[2]), tensor_end(f[1].bt));

  std::array<cpu::ByteRange, 3> canary;
  canary.fill({.data = &canary, .bytes = 7});
  const auto two = ops::lora_rows_read_ahead(parts, std::span(canary).first(2));
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(end(two[0]), tensor_end(f[0].bt));
  EXPECT_EQ(two[1].data, f[1].a.data());
  EXPECT_EQ(canary[2].data, &canary) << "written past the storage";
  EXPECT_TRUE(ops::lora_rows_read_ahead(parts, {}).empty());
}

TEST(LoraRowsAddGroup, RefusesMoreThanThreeProjections) {
  Tensor x = Tensor::zeros(DType::F32, {2, 8}), y = Tensor::zeros(DType::F32, {2, 8}),
         u = Tensor::zeros(DType::F32, {2, 2});
  const ops::LoraRowsPart parts[4] = {{{}, &y}, {{}, &y}, {{}, &y}, {{}, &y}};
  EXPECT_THROW(ops::lora_rows_add_group(x, parts, u), Error);
}

}  // namespace
}  // namespace brioche::train
