// A quantized weight's AMX tiles made once (ops/amx_weight_tiles.h) against
// the path before them: the weight decoded to f32 and packed by amx_gemm on
// every call. Both round the same f32 values to bf16 and sum the same tiles
// in the same order, so the products must agree bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>
#include <vector>

#include "backend/cpu/amx_gemm.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/linear_backward.h"
#include "ops/amx_weight_tiles.h"
#include "ops/linear_backward.h"
#include "ops/matmul_args.h"
#include "ops/quantize.h"
#include "ops/test_tensors.h"

namespace brioche::ops {
namespace {

using backend::cpu::AmxWeightProduct;

// out = a·B through the f32 decoded weight, packed per call (the path before the kept tiles).
Tensor decoded_product(const Tensor& a, const Tensor& w, AmxWeightProduct product, const Tensor* start) {
  const Tensor wd = convert(w, DType::F32);  // [m, k]
  const int64_t n = a.dim(0), m = w.dim(0), k = w.dim(1);
  const bool forward = product == AmxWeightProduct::Forward;
  Tensor out = start ? convert(*start, DType::F32) : Tensor::zeros(DType::F32, {n, forward ? m : k});
  backend::cpu::amx_gemm({.a = a.data_as<float>(),
                          .lda = a.dim(1),
                          .b = wd.data_as<float>(),
                          .ldb = k,
                          .out = out.data_as<float>(),
                          .ldo = out.dim(1),
                          .rows = n,
                          .width = forward ? m : k,
                          .T = forward ? k : m,
                          .accumulate = start != nullptr,
                          .split = false,
                          .b_transposed = forward});
  return out;
}

void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  for (int64_t r = 0; r < got.dim(0); ++r)
    ASSERT_EQ(std::memcmp(got.row_ptr(r), want.row_ptr(r), size_t(got.dim(1)) * 4), 0) << what << " row " << r;
}

// y = x·Wᵀ through the kept tiles (the training forward, ops level).
Tensor kept_forward(const Tensor& x, const Tensor& w) {
  Tensor y = Tensor::zeros(DType::F32, {x.dim(0), w.dim(0)});
  EXPECT_TRUE(training_matmul_on_amx(w, detail::matmul_args(x, w, y, "test")));
  return y;
}

TEST(AmxWeightTiles, KeptTilesGiveTheDecodedPathsBits) {
  if (!cpu::amx_bf16_available()) GTEST_SKIP() << "no AMX bf16 on this CPU";
  cpu::set_amx_override(true);
  uint32_t seed = 40;
  for (auto [n, m, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 70, 256}, {8, 64, 64}, {70, 200, 96}}) {
    for (DType t : {DType::Q4_1, DType::Q8_0, DType::Q4_K}) {
      if (k % dtype_info(t).block_elems != 0) continue;
      const std::string what =
          std::string(dtype_name(t)) + " " + std::to_string(n) + "x" + std::to_string(m) + "x" + std::to_string(k);
      const Tensor w = convert(random_f32(m, k, seed++), t);
      const Tensor x = random_f32(n, k, seed++), dy = random_f32(n, m, seed++), start = random_f32(n, k, seed++);
      const size_t kept_before = amx_weight_tiles_bytes();
      // The forward: kept tiles (made by the first call, read by the second), and per call.
      const Tensor y_want = decoded_product(x, w, AmxWeightProduct::Forward, nullptr);
      expect_same_bits(kept_forward(x, w), y_want, what + " forward, first call");
      const uint16_t* tiles = amx_weight_tiles(w, AmxWeightProduct::Forward);
      ASSERT_NE(tiles, nullptr) << what;
      expect_same_bits(kept_forward(x, w), y_want, what + " forward, kept");
      EXPECT_EQ(amx_weight_tiles(w, AmxWeightProduct::Forward), tiles) << what << ": made again";
      Tensor y = Tensor::zeros(DType::F32, {n, m});
      ASSERT_TRUE(backend::cpu::training_matmul_amx({.x = x.data_as<float>(),
                                                     .ldx = k,
                                                     .wtype = t,
                                                     .w = w.data(),
                                                     .w_row_bytes = size_t(w.stride(0)),
                                                     .y = y.data_as<float>(),
                                                     .ldy = m,
                                                     .n = n,
                                                     .m = m,
                                                     .k = k}));
      expect_same_bits(y, y_want, what + " forward, decoded per call");
      // The input gradient, overwriting and accumulating.
      const Tensor dx_want = decoded_product(dy, w, AmxWeightProduct::InputGrad, nullptr);
      const Tensor dx_acc_want = decoded_product(dy, w, AmxWeightProduct::InputGrad, &start);
      for (int call = 0; call < 2; ++call) {
        Tensor dx = Tensor::zeros(DType::F32, {n, k}), dx_acc = convert(start, DType::F32);
        matmul_input_grad(dy, w, dx, GradWrite::Overwrite);
        matmul_input_grad(dy, w, dx_acc, GradWrite::Accumulate);
        expect_same_bits(dx, dx_want, what + " dx, call " + std::to_string(call));
        expect_same_bits(dx_acc, dx_acc_want, what + " dx += , call " + std::to_string(call));
      }
      Tensor dx = Tensor::zeros(DType::F32, {n, k});
      backend::cpu::matmul_input_grad({.dy = dy.data_as<float>(),
                                       .wtype = t,
                                       .w = w.data(),
                                       .w_row_bytes = size_t(w.stride(0)),
                                       .dx = dx.data_as<float>(),
                                       .ld_dy = m,
                                       .ld_dx = k,
                                       .n = n,
                                       .m = m,
                                       .k = k,
                                       .accumulate = false});
      expect_same_bits(dx, dx_want, what + " dx, decoded per call");
      const backend::cpu::AmxWeight shape{.wtype = t,
                                          .w = w.data(),
                                          .w_row_bytes = size_t(w.stride(0)),
                                          .m = m,
                                          .k = k,
                                          .product = AmxWeightProduct::Forward};
      EXPECT_EQ(amx_weight_tiles_bytes() - kept_before, 4 * backend::cpu::amx_weight_tiles_size(shape)) << what;
    }
  }
  cpu::clear_amx_override();
}

// A weight written after its tiles were made (Storage::version) gets new
// ones; freeing it frees them.
TEST(AmxWeightTiles, WrittenWeightsAreRepackedAndFreedWithTheirStorage) {
  if (!cpu::amx_bf16_available()) GTEST_SKIP() << "no AMX bf16 on this CPU";
  cpu::set_amx_override(true);
  const size_t kept_before = amx_weight_tiles_bytes();
  {
    const Tensor w = convert(random_f32(96, 128, 1), DType::Q8_0), other = convert(random_f32(96, 128, 2), DType::Q8_0);
    const Tensor x = random_f32(20, 128, 3);
    expect_same_bits(kept_forward(x, w), decoded_product(x, w, AmxWeightProduct::Forward, nullptr), "before");
    EXPECT_GT(amx_weight_tiles_bytes(), kept_before);
    std::memcpy(w.data(), other.data(), w.nbytes());
    w.note_written();
    expect_same_bits(kept_forward(x, w), decoded_product(x, other, AmxWeightProduct::Forward, nullptr), "after");
  }
  EXPECT_EQ(amx_weight_tiles_bytes(), kept_before);
  cpu::clear_amx_override();
}

// BRIOCHE_CPU_AMX=0's path: no product of a quantized weight takes AMX.
TEST(AmxWeightTiles, AmxOffKeepsTheF32Panels) {
  cpu::set_amx_override(false);
  EXPECT_FALSE(backend::cpu::amx_weight_products(DType::Q4_1, 64, 576, 576));
  const Tensor w = convert(random_f32(64, 64, 5), DType::Q4_1), x = random_f32(16, 64, 6);
  Tensor y = Tensor::zeros(DType::F32, {16, 64});
  EXPECT_FALSE(training_matmul_on_amx(w, detail::matmul_args(x, w, y, "test")));
  cpu::clear_amx_override();
}

}  // namespace
}  // namespace brioche::ops
