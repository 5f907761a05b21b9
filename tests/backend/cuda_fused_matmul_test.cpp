// The decode fusions of ops/fused_matmul.h on CUDA against the same ops
// unfused on CUDA (themselves checked against the CPU reference in
// cuda_ops_test.cpp): Q/K/V in one launch, the residual add in the matmul,
// SwiGLU in the gate/up GEMV. Row counts cover the fused GEMV (n ≤ 8) and the
// cuBLASLt fallback (n > 8); weights every dense and several quantized dtypes.
//
// Tolerance: the fused kernels do the same f32 sums per output in the same
// order; only silu's exp differs (__expf vs expf, ~2 ulp): NMSE < 1e-10.
// Without a GPU every test reports "skipped: no CUDA device".
#include <gtest/gtest.h>

#if BRIOCHE_CUDA

#include <random>
#include <vector>

#include "core/tensor.h"
#include "ops/add.h"
#include "ops/device.h"
#include "ops/fused_matmul.h"
#include "ops/matmul.h"
#include "ops/quantize.h"
#include "ops/swiglu.h"

namespace brioche::ops {
namespace {

#define REQUIRE_CUDA_DEVICE() \
  if (!cuda_available()) GTEST_SKIP() << "skipped: no CUDA device"

Tensor random_f32(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  Tensor t = Tensor::zeros(DType::F32, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) t.data_as<float>()[i] = g(rng);
  return t;
}

// A weight [rows, cols] of `dtype` on the device.
Tensor random_weight(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  Tensor f = random_f32(rows, cols, seed);
  Tensor w = Tensor::zeros(dtype, {rows, cols});
  for (int64_t r = 0; r < rows; ++r) quantize_row(dtype, f.row_as<float>(r), w.row_ptr(r), cols);
  return to_device(w, Device::CUDA);
}

Tensor device_f32(int64_t rows, int64_t cols, uint32_t seed) {
  return to_device(random_f32(rows, cols, seed), Device::CUDA);
}

double nmse(const Tensor& got_device, const Tensor& want_device) {
  Tensor got = to_device(got_device, Device::CPU), want = to_device(want_device, Device::CPU);
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.data_as<float>()[i], w = want.data_as<float>()[i];
    num += (g - w) * (g - w);
    den += w * w;
  }
  return num / den;
}

const DType kDtypes[] = {DType::BF16, DType::F16, DType::F32, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K};
const int kRows[] = {1, 3, 8, 12};

TEST(CudaFusedMatmul, AccumulateAddsToTheResidual) {
  REQUIRE_CUDA_DEVICE();
  const int64_t k = 512, m = 320;
  for (DType dtype : kDtypes) {
    Tensor w = random_weight(dtype, m, k, 1);
    for (int n : kRows) {
      Tensor x = device_f32(n, k, 2), residual = device_f32(n, m, 3);
      Tensor fused = to_device(to_device(residual, Device::CPU), Device::CUDA), plain = zeros(DType::F32, {n, m}, Device::CUDA);
      Tensor scratch = zeros(DType::F32, {n, m}, Device::CUDA);
      matmul_accumulate(x, w, fused, scratch);
      matmul(x, w, plain);
      add(residual, plain, plain);
      EXPECT_LT(nmse(fused, plain), 1e-10) << dtype_name(dtype) << " n=" << n;
    }
  }
}

TEST(CudaFusedMatmul, SwigluMatmulMatchesGateUpSwiglu) {
  REQUIRE_CUDA_DEVICE();
  const int64_t k = 256, inter = 704;
  for (DType dtype : kDtypes) {
    Tensor wg = random_weight(dtype, inter, k, 4), wu = random_weight(dtype, inter, k, 5);
    for (int n : kRows) {
      Tensor x = device_f32(n, k, 6);
      Tensor fused = zeros(DType::F32, {n, inter}, Device::CUDA), scratch = zeros(DType::F32, {n, inter}, Device::CUDA);
      Tensor g = zeros(DType::F32, {n, inter}, Device::CUDA), u = zeros(DType::F32, {n, inter}, Device::CUDA);
      swiglu_matmul(x, wg, wu, fused, scratch);
      matmul(x, wg, g);
      matmul(x, wu, u);
      swiglu(g, u, g);
      EXPECT_LT(nmse(fused, g), 1e-10) << dtype_name(dtype) << " n=" << n;
    }
  }
}

TEST(CudaFusedMatmul, GroupOfThreeMatchesSeparateMatmuls) {
  REQUIRE_CUDA_DEVICE();
  const int64_t k = 512;
  const int64_t ms[] = {384, 128, 128};  // Q, K, V of a GQA layer
  for (DType dtype : kDtypes) {
    Tensor w[3], got[3], want[3];
    for (int i = 0; i < 3; ++i) w[i] = random_weight(dtype, ms[i], k, 10 + i);
    for (int n : kRows) {
      Tensor x = device_f32(n, k, 7);
      for (int i = 0; i < 3; ++i) {
        got[i] = zeros(DType::F32, {n, ms[i]}, Device::CUDA);
        want[i] = zeros(DType::F32, {n, ms[i]}, Device::CUDA);
        matmul(x, w[i], want[i]);
      }
      const Tensor* ws[] = {&w[0], &w[1], &w[2]};
      Tensor* ys[] = {&got[0], &got[1], &got[2]};
      matmul_group(x, ws, ys);
      for (int i = 0; i < 3; ++i) EXPECT_LT(nmse(got[i], want[i]), 1e-10) << dtype_name(dtype) << " n=" << n << " part " << i;
    }
  }
}

}  // namespace
}  // namespace brioche::ops

#else

TEST(CudaFusedMatmul, NotBuilt) { GTEST_SKIP() << "skipped: no CUDA device (built without BRIOCHE_CUDA)"; }

#endif
