// ops::lora_rows_add_group: several projections of one x in one call (the
// CPU serves Q/K/V and gate/up this way) give each projection exactly what
// its own lora_rows_add gives, and both match a double-precision reference,
// on every instruction set this CPU runs (the AVX2 and AVX-512 kernels).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
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

// y[r] + (x[r]·Aᵀ)·bt in double for the segments' rows, y elsewhere.
std::vector<double> reference(const Tensor& x, std::span<const ops::LoraRows> segs, const Tensor& y) {
  const int64_t in = x.dim(1), out = y.dim(1);
  std::vector<double> want(size_t(y.dim(0) * out));
  for (int64_t i = 0; i < y.dim(0) * out; ++i) want[size_t(i)] = y.data_as<float>()[i];
  for (const ops::LoraRows& s : segs) {
    const int64_t rank = s.a->dim(0);
    for (int32_t r = s.first_row; r < s.first_row + s.n_rows; ++r) {
      std::vector<double> u(size_t(rank), 0.0);
      for (int64_t k = 0; k < rank; ++k)
        for (int64_t c = 0; c < in; ++c)
          u[size_t(k)] += double(f16_to_f32(s.a->data_as<uint16_t>()[k * in + c])) * x.data_as<float>()[r * in + c];
      for (int64_t c = 0; c < out; ++c)
        for (int64_t k = 0; k < rank; ++k)
          want[size_t(r * out + c)] += u[size_t(k)] * f16_to_f32(s.bt->data_as<uint16_t>()[k * out + c]);
    }
  }
  return want;
}

// rows: the batch; the segments put 2 rows on each of 8 adapters (a decode
// step of 16 streams), part 1 skips adapter 3, part 2 takes adapter 0 on
// every row. only_last: parts 0 and 1 without adapters (an adapter of
// up_proj but not gate_proj), so the group is one projection.
void check_group(int64_t rows, bool only_last = false) {
  std::mt19937 rng(7);
  constexpr int64_t kIn = 576, kRank = 8;
  const int64_t outs[3] = {576, 192, 1536};
  Tensor x = random_tensor(DType::F32, rows, kIn, 1.0f, rng);
  std::vector<Factors> factors[3];
  std::vector<ops::LoraRows> segs[3];
  for (int p = 0; p < 3; ++p) {
    for (int g = 0; g < 8; ++g)
      factors[p].push_back(
          {random_tensor(DType::F16, kRank, kIn, 0.05f, rng), random_tensor(DType::F16, kRank, outs[p], 0.05f, rng)});
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

TEST(LoraRowsAddGroup, RefusesMoreThanThreeProjections) {
  Tensor x = Tensor::zeros(DType::F32, {2, 8}), y = Tensor::zeros(DType::F32, {2, 8}),
         u = Tensor::zeros(DType::F32, {2, 2});
  const ops::LoraRowsPart parts[4] = {{{}, &y}, {{}, &y}, {{}, &y}, {{}, &y}};
  EXPECT_THROW(ops::lora_rows_add_group(x, parts, u), Error);
}

}  // namespace
}  // namespace brioche::train
