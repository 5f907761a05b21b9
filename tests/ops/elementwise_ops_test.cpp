// rms_norm, swiglu, softmax, add, add_bias against naive double references,
// on odd shapes and strided (row-padded) views.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/add.h"
#include "ops/rms_norm.h"
#include "ops/softmax.h"
#include "ops/swiglu.h"
#include "ops/test_tensors.h"

namespace brioche {
namespace {

struct Shape2 {
  int64_t rows, cols;
};
const Shape2 kShapes[] = {{1, 1}, {1, 7}, {3, 33}, {5, 576}, {17, 1023}, {64, 129}};

TEST(RmsNorm, MatchesDoubleReference) {
  for (auto s : kShapes) {
    Tensor x = random_f32(s.rows, s.cols, 1, 3.0f);
    Tensor w = random_f32(1, s.cols, 2).reshape({s.cols});
    Tensor xv = padded(x, 5);
    Tensor out = Tensor::zeros(DType::F32, {s.rows, s.cols});
    ops::rms_norm(xv, w, 1e-5f, out);
    for (int64_t r = 0; r < s.rows; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < s.cols; ++c) ss += double(x.row_as<float>(r)[c]) * x.row_as<float>(r)[c];
      double inv = 1.0 / std::sqrt(ss / s.cols + 1e-5);
      for (int64_t c = 0; c < s.cols; ++c) {
        double want = x.row_as<float>(r)[c] * inv * w.data_as<float>()[c];
        ASSERT_NEAR(out.row_as<float>(r)[c], want, 1e-5 * (1 + std::abs(want)))
            << s.rows << "x" << s.cols << " at " << r << "," << c;
      }
    }
  }
}

TEST(RmsNorm, InPlaceAndShapeErrors) {
  Tensor x = random_f32(4, 10, 3);
  Tensor copy = random_f32(4, 10, 3);
  Tensor w = random_f32(1, 10, 4).reshape({10});
  Tensor out = Tensor::zeros(DType::F32, {4, 10});
  ops::rms_norm(copy, w, 1e-6f, out);
  ops::rms_norm(x, w, 1e-6f, x);
  for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(x.data_as<float>()[i], out.data_as<float>()[i]);
  Tensor bad_w = Tensor::zeros(DType::F32, {9});
  EXPECT_THROW(ops::rms_norm(x, bad_w, 1e-6f, out), Error);
  Tensor f16 = Tensor::zeros(DType::F16, {4, 10});
  EXPECT_THROW(ops::rms_norm(f16, w, 1e-6f, out), Error);
}

TEST(Swiglu, MatchesDoubleReference) {
  for (auto s : kShapes) {
    Tensor g = random_f32(s.rows, s.cols, 5, 4.0f);
    Tensor u = random_f32(s.rows, s.cols, 6);
    Tensor out = Tensor::zeros(DType::F32, {s.rows, s.cols});
    ops::swiglu(padded(g, 3), u, out);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.cols; ++c) {
        double gv = g.row_as<float>(r)[c], uv = u.row_as<float>(r)[c];
        double want = gv / (1 + std::exp(-gv)) * uv;
        ASSERT_NEAR(out.row_as<float>(r)[c], want, 1e-6 * (1 + std::abs(want)));
      }
  }
  Tensor a = Tensor::zeros(DType::F32, {2, 3}), b = Tensor::zeros(DType::F32, {2, 4});
  EXPECT_THROW(ops::swiglu(a, b, a), Error);
}

TEST(Softmax, MatchesDoubleReference) {
  for (auto s : kShapes) {
    Tensor x = random_f32(s.rows, s.cols, 7, 10.0f);
    Tensor y = padded(x, 2);
    ops::softmax(y);
    for (int64_t r = 0; r < s.rows; ++r) {
      double max = -INFINITY, sum = 0;
      for (int64_t c = 0; c < s.cols; ++c) max = std::max<double>(max, x.row_as<float>(r)[c]);
      for (int64_t c = 0; c < s.cols; ++c) sum += std::exp(x.row_as<float>(r)[c] - max);
      for (int64_t c = 0; c < s.cols; ++c) {
        double want = std::exp(x.row_as<float>(r)[c] - max) / sum;
        ASSERT_NEAR(y.row_as<float>(r)[c], want, 1e-6 * (1 + want));
      }
    }
  }
}

TEST(Softmax, HandlesInfinities) {
  Tensor x = Tensor::zeros(DType::F32, {2, 4});
  float* p = x.data_as<float>();
  float ninf = -INFINITY;
  float vals[] = {ninf, 0.0f, ninf, 0.0f, ninf, ninf, ninf, ninf};
  for (int i = 0; i < 8; ++i) p[i] = vals[i];
  ops::softmax(x);
  EXPECT_FLOAT_EQ(p[0], 0.0f);
  EXPECT_FLOAT_EQ(p[1], 0.5f);
  EXPECT_FLOAT_EQ(p[3], 0.5f);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(p[i], 0.0f);
}

TEST(Add, ResidualAndBias) {
  for (auto s : kShapes) {
    Tensor a = random_f32(s.rows, s.cols, 8);
    Tensor b = random_f32(s.rows, s.cols, 9);
    Tensor out = Tensor::zeros(DType::F32, {s.rows, s.cols});
    ops::add(padded(a, 1), b, out);
    Tensor bias = random_f32(1, s.cols, 10).reshape({s.cols});
    Tensor xb = padded(a, 4);
    ops::add_bias(xb, bias);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.cols; ++c) {
        ASSERT_EQ(out.row_as<float>(r)[c], a.row_as<float>(r)[c] + b.row_as<float>(r)[c]);
        ASSERT_EQ(xb.row_as<float>(r)[c], a.row_as<float>(r)[c] + bias.data_as<float>()[c]);
      }
  }
  Tensor a = Tensor::zeros(DType::F32, {2, 3}), b = Tensor::zeros(DType::F32, {3, 3});
  EXPECT_THROW(ops::add(a, b, a), Error);
  Tensor bias = Tensor::zeros(DType::F32, {4});
  EXPECT_THROW(ops::add_bias(a, bias), Error);
}

}  // namespace
}  // namespace brioche
