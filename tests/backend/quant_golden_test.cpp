// Dequantization and reference quantization against goldens written by
// tools/oracle/quant_goldens.py (python gguf for GGUF types, numpy for MLX affine).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/quant_ref.h"
#include "core/dtype.h"
#include "core/error.h"

namespace brioche::cpu {
namespace {

struct Golden {
  std::string provenance;
  DType dtype{};
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> blocks;  // [rows, row_bytes]
  std::vector<float> values;    // [rows, cols]
  std::vector<float> src;       // [rows, cols] or empty
};

Golden load_golden(const std::string& name) {
  const std::string path = std::string(BRIOCHE_SOURCE_DIR) + "/tests/backend/golden/quant_" + name + ".bin";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing golden " << path;
  Golden g;
  std::string magic, dtype_name, dims, has_src;
  std::getline(in, magic);
  std::getline(in, g.provenance);
  std::getline(in, dtype_name);
  std::getline(in, dims);
  std::getline(in, has_src);
  EXPECT_EQ(magic, "BRQG1") << path;
  EXPECT_TRUE(parse_dtype(dtype_name, &g.dtype)) << dtype_name;
  std::istringstream(dims) >> g.rows >> g.cols;
  g.blocks.resize(size_t(g.rows) * row_bytes(g.dtype, g.cols));
  g.values.resize(size_t(g.rows * g.cols));
  in.read(reinterpret_cast<char*>(g.blocks.data()), std::streamsize(g.blocks.size()));
  in.read(reinterpret_cast<char*>(g.values.data()), std::streamsize(g.values.size() * 4));
  if (has_src == "1") {
    g.src.resize(g.values.size());
    in.read(reinterpret_cast<char*>(g.src.data()), std::streamsize(g.src.size() * 4));
  }
  EXPECT_TRUE(in.good()) << "truncated golden " << path;
  return g;
}

class QuantGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantGolden, DequantizeMatchesOracleExactly) {
  const Golden g = load_golden(GetParam());
  ASSERT_GT(g.rows, 0);
  EXPECT_NE(g.provenance.find("quant_goldens.py"), std::string::npos);
  const size_t rb = row_bytes(g.dtype, g.cols);
  std::vector<float> out(size_t(g.cols));
  for (int64_t r = 0; r < g.rows; ++r) {
    dequantize_row_ref(g.dtype, g.blocks.data() + r * rb, out.data(), g.cols);
    for (int64_t i = 0; i < g.cols; ++i) {
      const float want = g.values[size_t(r * g.cols + i)];
      // The oracle computes in f32 (numpy) with the same formula; allow one
      // rounding of difference from operation order (d*sc*q vs (d*sc)*q).
      ASSERT_NEAR(out[size_t(i)], want, 1e-6f * std::max(1.0f, std::fabs(want)))
          << GetParam() << " row " << r << " element " << i;
    }
  }
}

// gguf's quantize() (= llama.cpp's reference quantizers) exists for these types only.
class QuantGoldenWithSource : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantGoldenWithSource, ReferenceQuantizerMatchesLlamaCppBitForBit) {
  const Golden g = load_golden(GetParam());
  ASSERT_FALSE(g.src.empty()) << GetParam() << ": golden lacks the f32 source rows";
  const size_t rb = row_bytes(g.dtype, g.cols);
  std::vector<uint8_t> out(rb);
  for (int64_t r = 0; r < g.rows; ++r) {
    quantize_row_ref(g.dtype, g.src.data() + r * g.cols, out.data(), g.cols);
    ASSERT_EQ(0, std::memcmp(out.data(), g.blocks.data() + r * rb, rb)) << GetParam() << " row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantGolden,
                         ::testing::Values("q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k", "affine4_g32", "affine4_g64",
                                           "affine4_g128", "affine8_g32", "affine8_g64", "affine8_g128",
                                           "model_token_embd", "model_ffn_gate"));

INSTANTIATE_TEST_SUITE_P(GgufQuantizers, QuantGoldenWithSource, ::testing::Values("q8_0", "q4_0", "q4_1"));

// Round trip for every type: quantize then dequantize stays close to the input
// (bounds are per type: max error relative to the row's max magnitude; Q4_0
// maps the largest value to -8, so the other side clamps at 7/8 of it).
TEST(QuantRoundTrip, EveryTypeReconstructsWithinItsResolution) {
  const struct {
    DType t;
    double max_rel_err;
  } kCases[] = {
      {DType::F16, 1e-3},         {DType::BF16, 8e-3},         {DType::Q8_0, 1e-2},        {DType::Q4_0, 0.13},
      {DType::Q4_1, 0.1},         {DType::Q4_K, 0.12},         {DType::Q5_K, 0.06},        {DType::Q6_K, 0.03},
      {DType::AFFINE4_G32, 0.1},  {DType::AFFINE4_G64, 0.1},   {DType::AFFINE4_G128, 0.1}, {DType::AFFINE8_G32, 0.01},
      {DType::AFFINE8_G64, 0.01}, {DType::AFFINE8_G128, 0.01},
  };
  const int64_t n = 1024;
  std::vector<float> x(n), y(n);
  uint32_t state = 12345;
  for (auto& v : x) {
    state = state * 1664525u + 1013904223u;
    v = float(int32_t(state >> 8) % 20001 - 10000) / 5000.0f;
  }
  for (const auto& c : kCases) {
    std::vector<uint8_t> q(row_bytes(c.t, n));
    quantize_row_ref(c.t, x.data(), q.data(), n);
    dequantize_row_ref(c.t, q.data(), y.data(), n);
    double max_err = 0;
    for (int64_t i = 0; i < n; ++i) max_err = std::max(max_err, double(std::fabs(x[i] - y[i])));
    EXPECT_LT(max_err / 2.0, c.max_rel_err) << dtype_name(c.t);
  }
}

TEST(QuantRef, RejectsRowNotMultipleOfBlock) {
  std::vector<float> x(48);
  std::vector<uint8_t> q(64);
  EXPECT_THROW(quantize_row_ref(DType::Q4_K, x.data(), q.data(), 48), brioche::Error);
  EXPECT_THROW(dequantize_row_ref(DType::Q8_0, q.data(), x.data(), 40), brioche::Error);
}

}  // namespace
}  // namespace brioche::cpu
