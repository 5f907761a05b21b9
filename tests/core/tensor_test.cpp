#include "core/tensor.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/half.h"

namespace brioche {
namespace {

TEST(Tensor, ContiguousStridesAreBytes) {
  Tensor t = Tensor::zeros(DType::F32, {2, 3, 4});
  EXPECT_EQ(t.stride(2), 4);
  EXPECT_EQ(t.stride(1), 16);
  EXPECT_EQ(t.stride(0), 48);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_TRUE(t.is_contiguous());
}

TEST(Tensor, QuantizedRowsArePackedBlocks) {
  Tensor t = Tensor::zeros(DType::Q4_K, {3, 512});
  EXPECT_EQ(t.stride(0), 2 * 144);
  EXPECT_EQ(t.nbytes(), 3u * 2 * 144);
  EXPECT_THROW(Tensor::zeros(DType::Q4_K, {3, 100}), Error);
}

TEST(Tensor, SliceAndSelectAreViews) {
  Tensor t = Tensor::zeros(DType::F32, {4, 6});
  for (int i = 0; i < 24; ++i) t.data_as<float>()[i] = float(i);
  Tensor rows = t.slice(0, 1, 3);
  EXPECT_EQ(rows.dim(0), 2);
  EXPECT_EQ(rows.row_as<float>(0)[0], 6.0f);
  Tensor cols = t.slice(1, 2, 5);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.row_as<float>(1)[0], 8.0f);
  Tensor r = t.select(3);
  EXPECT_EQ(r.rank(), 1);
  EXPECT_EQ(r.data_as<float>()[5], 23.0f);
  EXPECT_THROW(t.slice(0, 3, 5), Error);
}

TEST(Half, RoundTripsAndRoundsToNearestEven) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(f16_to_f32(f32_to_f16(f)), f);
  }
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);  // tie -> even
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(3.140625f)), 3.140625f);
}

}  // namespace
}  // namespace brioche
