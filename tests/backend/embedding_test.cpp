// Embedding lookup: rows of any dtype decoded to f32; bad ids are named errors.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/quant_ref.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/embedding.h"
#include "ops/quantize.h"

namespace brioche {
namespace {

TEST(Embedding, DecodesRowsOfEveryDtype) {
  const int64_t vocab = 11, hidden = 256;
  for (int t = 0; t < kNumDTypes; ++t) {
    const DType dtype = DType(t);
    if (dtype == DType::I32) continue;
    Tensor table = Tensor::zeros(dtype, {vocab, hidden});
    std::vector<float> src(static_cast<size_t>(hidden));
    for (int64_t r = 0; r < vocab; ++r) {
      for (int64_t i = 0; i < hidden; ++i) src[size_t(i)] = float((r * 31 + i * 7) % 19) * 0.1f - 0.9f;
      ops::quantize_row(dtype, src.data(), table.row_ptr(r), hidden);
    }
    const std::vector<int32_t> ids = {3, 0, 10, 3};
    Tensor out = Tensor::zeros(DType::F32, {int64_t(ids.size()), hidden});
    ops::embedding(table, ids, out);
    std::vector<float> want(static_cast<size_t>(hidden));
    for (size_t i = 0; i < ids.size(); ++i) {
      ops::dequantize_row(dtype, table.row_ptr(ids[i]), want.data(), hidden);
      ASSERT_EQ(0, std::memcmp(out.row_ptr(int64_t(i)), want.data(), size_t(hidden) * 4)) << dtype_name(dtype);
    }
  }
}

TEST(Embedding, OutOfRangeIdIsANamedError) {
  Tensor table = Tensor::zeros(DType::Q8_0, {4, 32});
  Tensor out = Tensor::zeros(DType::F32, {2, 32});
  for (int32_t bad : {4, -1}) {
    const std::vector<int32_t> ids = {1, bad};
    try {
      ops::embedding(table, ids, out);
      FAIL() << "expected an error for id " << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("token id " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 4)"), std::string::npos) << msg;
    }
  }
}

// Checked before the parallel loop: an exception thrown in a worker thread
// would end the process instead of reaching the caller.
TEST(Embedding, IndexTypedTableIsANamedErrorNotAnAbort) {
  Tensor table = Tensor::zeros(DType::I32, {4, 32});
  const std::vector<int32_t> ids(4096, 1);  // many chunks
  Tensor out = Tensor::zeros(DType::F32, {int64_t(ids.size()), 32});
  Tensor f32_table = Tensor::zeros(DType::F32, {4, 32});
  // Each round on a fresh thread (a loop started inside a failed task would
  // run inline), right after a valid lookup, so the workers are awake to
  // claim chunks.
  for (int round = 0; round < 50; ++round) {
    std::string error;
    std::thread caller([&] {
      ops::embedding(f32_table, ids, out);
      try {
        ops::embedding(table, ids, out);
      } catch (const Error& e) {
        error = e.what();
      }
    });
    caller.join();
    ASSERT_NE(error.find("i32 is an index type"), std::string::npos) << "round " << round << ": '" << error << "'";
  }
}

TEST(Convert, RoundTripsThroughQuantizedTypes) {
  Tensor src = Tensor::zeros(DType::F32, {3, 64});
  for (int64_t i = 0; i < 3 * 64; ++i) src.data_as<float>()[i] = float(i % 13) - 6.0f;
  Tensor q = ops::convert(src, DType::Q8_0);
  EXPECT_EQ(q.dtype(), DType::Q8_0);
  Tensor back = ops::convert(q, DType::F32);
  for (int64_t i = 0; i < 3 * 64; ++i) EXPECT_NEAR(back.data_as<float>()[i], src.data_as<float>()[i], 0.03f);
  Tensor bf = ops::convert(src, DType::BF16);
  Tensor back2 = ops::convert(bf, DType::F32);
  for (int64_t i = 0; i < 3 * 64; ++i) EXPECT_EQ(back2.data_as<float>()[i], src.data_as<float>()[i]);
  Tensor odd = Tensor::zeros(DType::F32, {2, 48});
  EXPECT_THROW(ops::convert(odd, DType::Q4_0), Error);
}

}  // namespace
}  // namespace brioche
