// rms_norm, swiglu, softmax, add, add_bias: in place, infinities and shape
// errors. Their values on odd shapes and strided views, against double
// references on the CPU and against the CPU on CUDA, are cases of the op ×
// backend harness (tests/backend/op_backend_test.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/add.h"
#include "ops/rms_norm.h"
#include "ops/softmax.h"
#include "ops/swiglu.h"
#include "ops/test_tensors.h"

namespace brioche {
namespace {

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

TEST(Swiglu, ShapeErrors) {
  Tensor a = Tensor::zeros(DType::F32, {2, 3}), b = Tensor::zeros(DType::F32, {2, 4});
  EXPECT_THROW(ops::swiglu(a, b, a), Error);
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

TEST(Add, ShapeErrors) {
  Tensor a = Tensor::zeros(DType::F32, {2, 3}), b = Tensor::zeros(DType::F32, {3, 3});
  EXPECT_THROW(ops::add(a, b, a), Error);
  Tensor bias = Tensor::zeros(DType::F32, {4});
  EXPECT_THROW(ops::add_bias(a, bias), Error);
}

}  // namespace
}  // namespace brioche
