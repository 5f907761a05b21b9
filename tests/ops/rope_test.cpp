// RoPE: both pairings, scaling variants, against a double reference; and the
// identity that makes GGUF llama work: interleaved RoPE on llama.cpp-permuted
// rows equals NeoX RoPE on the original rows, permuted.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/rope.h"

namespace brioche {
namespace {

Tensor random_rows(int64_t rows, int64_t cols, uint32_t seed) {
  Tensor t = Tensor::zeros(DType::F32, {rows, cols});
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < rows * cols; ++i) t.data_as<float>()[i] = dist(rng);
  return t;
}

// Hugging Face's _compute_llama3_parameters, in double.
std::vector<double> llama3_reference(int d, double theta, double factor, double low, double high, double old_ctx) {
  std::vector<double> out;
  for (int i = 0; i < d / 2; ++i) {
    double w = 1.0 / std::pow(theta, 2.0 * i / d);
    double wavelen = 2 * std::numbers::pi / w;
    double scaled = wavelen > old_ctx / low ? w / factor : w;
    double smooth = (old_ctx / wavelen - low) / (high - low);
    double smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
    bool medium = !(wavelen < old_ctx / high) && !(wavelen > old_ctx / low);
    out.push_back(medium ? smoothed : scaled);
  }
  return out;
}

TEST(RopeInvFreq, DefaultLinearLlama3AndFactors) {
  auto plain = ops::rope_inv_freq(64, 10000.0f, {});
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(plain[i], std::pow(10000.0, -2.0 * i / 64), 1e-7 * plain[i] + 1e-12);
  auto linear = ops::rope_inv_freq(64, 10000.0f, {.kind = ops::RopeScalingKind::Linear, .factor = 4});
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(linear[i], plain[i] / 4);
  ops::RopeScaling l3{.kind = ops::RopeScalingKind::Llama3,
                      .factor = 8,
                      .low_freq_factor = 1,
                      .high_freq_factor = 4,
                      .original_context = 8192};
  auto got = ops::rope_inv_freq(128, 500000.0f, l3);
  auto want = llama3_reference(128, 500000.0, 8, 1, 4, 8192);
  int n_scaled = 0, n_blend = 0;
  for (int i = 0; i < 64; ++i) {
    EXPECT_NEAR(got[i], want[i], 2e-6 * want[i]) << i;
    double w0 = std::pow(500000.0, -2.0 * i / 128);
    if (std::abs(want[i] - w0 / 8) < 1e-12 * w0)
      ++n_scaled;
    else if (std::abs(want[i] - w0) > 1e-9 * w0)
      ++n_blend;
  }
  EXPECT_GT(n_scaled, 0);  // the test covers all three regimes
  EXPECT_GT(n_blend, 0);
  std::vector<float> factors(32);
  for (int i = 0; i < 32; ++i) factors[i] = 1.0f + i;
  auto with_factors = ops::rope_inv_freq(64, 10000.0f, {}, factors);
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(with_factors[i], plain[i] / (1.0f + i));
  EXPECT_THROW(ops::rope_inv_freq(64, 10000.0f, {}, std::vector<float>(3)), Error);
}

void check_against_reference(ops::RopeStyle style, int n_heads, int head_dim) {
  const int rows = 7;
  Tensor x = random_rows(rows, n_heads * head_dim, 11);
  Tensor y = random_rows(rows, n_heads * head_dim, 11);
  std::vector<int32_t> positions = {0, 1, 5, 17, 300, 4095, 70000};
  auto inv = ops::rope_inv_freq(head_dim, 10000.0f, {});
  ops::rope(y, positions, {.style = style, .n_heads = n_heads, .head_dim = head_dim, .inv_freq = inv});
  int half = head_dim / 2;
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < n_heads; ++h)
      for (int i = 0; i < half; ++i) {
        int a = style == ops::RopeStyle::NeoX ? i : 2 * i;
        int b = style == ops::RopeStyle::NeoX ? i + half : 2 * i + 1;
        const float* xr = x.row_as<float>(r) + h * head_dim;
        const float* yr = y.row_as<float>(r) + h * head_dim;
        double angle = double(float(positions[r]) * inv[i]);
        double ya = xr[a] * std::cos(angle) - xr[b] * std::sin(angle);
        double yb = xr[a] * std::sin(angle) + xr[b] * std::cos(angle);
        ASSERT_NEAR(yr[a], ya, 1e-5) << r << " " << h << " " << i;
        ASSERT_NEAR(yr[b], yb, 1e-5) << r << " " << h << " " << i;
      }
}

TEST(Rope, NeoxMatchesReference) { check_against_reference(ops::RopeStyle::NeoX, 3, 10); }
TEST(Rope, InterleavedMatchesReference) { check_against_reference(ops::RopeStyle::Interleaved, 5, 64); }

TEST(Rope, InterleavedOnPermutedEqualsNeoxPermuted) {
  // llama.cpp's converter reorders each head's rows: new index 2i <- i,
  // 2i+1 <- i + d/2. Rotating adjacent pairs of the permuted vector must give
  // the permutation of the rotate-half result.
  const int n_heads = 2, d = 16, rows = 4;
  Tensor x = random_rows(rows, n_heads * d, 12);
  Tensor perm = Tensor::zeros(DType::F32, {rows, n_heads * d});
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < n_heads; ++h)
      for (int i = 0; i < d / 2; ++i) {
        perm.row_as<float>(r)[h * d + 2 * i] = x.row_as<float>(r)[h * d + i];
        perm.row_as<float>(r)[h * d + 2 * i + 1] = x.row_as<float>(r)[h * d + i + d / 2];
      }
  std::vector<int32_t> pos = {3, 9, 27, 81};
  auto inv = ops::rope_inv_freq(d, 10000.0f, {});
  ops::rope(x, pos, {.style = ops::RopeStyle::NeoX, .n_heads = n_heads, .head_dim = d, .inv_freq = inv});
  ops::rope(perm, pos, {.style = ops::RopeStyle::Interleaved, .n_heads = n_heads, .head_dim = d, .inv_freq = inv});
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < n_heads; ++h)
      for (int i = 0; i < d / 2; ++i) {
        EXPECT_FLOAT_EQ(perm.row_as<float>(r)[h * d + 2 * i], x.row_as<float>(r)[h * d + i]);
        EXPECT_FLOAT_EQ(perm.row_as<float>(r)[h * d + 2 * i + 1], x.row_as<float>(r)[h * d + i + d / 2]);
      }
}

TEST(Rope, ShapeErrors) {
  Tensor x = random_rows(2, 12, 1);
  auto inv = ops::rope_inv_freq(4, 10000.0f, {});
  std::vector<int32_t> pos = {0, 1};
  EXPECT_THROW(ops::rope(x, pos, {.n_heads = 2, .head_dim = 4, .inv_freq = inv}), Error);
  std::vector<int32_t> short_pos = {0};
  EXPECT_THROW(ops::rope(x, short_pos, {.n_heads = 3, .head_dim = 4, .inv_freq = inv}), Error);
}

}  // namespace
}  // namespace brioche
