// ops::NormHandoff's host-side rules (ops/norm_handoff.h), on the CPU: what
// a writer hands on reaches only a reader of the same tensor and norm weight
// that no op wrote in between, and every other use is an error. The CPU ops
// never hand a norm on, so a stand-in payload plays the backend's norm here;
// the GPU's own handoff is tested in tests/backend/cuda_fused_matmul_test.cpp.
#include <gtest/gtest.h>

#include <memory>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/add.h"
#include "ops/fused_matmul.h"
#include "ops/norm_handoff.h"
#include "ops/rms_norm.h"
#include "ops/test_tensors.h"

namespace brioche {
namespace {

constexpr int64_t kDim = 64;

struct Fixture {
  Tensor y = random_f32(1, kDim, 1);
  Tensor other = random_f32(1, kDim, 2);
  Tensor norm_w = random_f32(1, kDim, 3).reshape({kDim});
  Tensor other_w = random_f32(1, kDim, 4).reshape({kDim});
  std::shared_ptr<void> payload = std::make_shared<int>(7);  // stands in for the backend's norm

  // A writer of y answering a request: y written, then its norm handed on.
  void write_and_hand_on(ops::NormHandoff& h) {
    const Tensor* w = h.take_request(y, "writer");
    ASSERT_NE(w, nullptr);
    y.note_written();
    h.hand_on(y, *w, payload);
  }
};

TEST(NormHandoff, ReaderOfTheSameTensorAndWeightTakesItOnce) {
  Fixture f;
  ops::NormHandoff h;
  h.request(f.y, f.norm_w);
  f.write_and_hand_on(h);
  EXPECT_EQ(h.take_handed(f.y, f.norm_w, "reader"), f.payload);
  EXPECT_EQ(h.take_handed(f.y, f.norm_w, "reader"), nullptr);  // taken
}

TEST(NormHandoff, NothingRequestedOrWithdrawnHandsNothingOn) {
  Fixture f;
  ops::NormHandoff h;
  EXPECT_EQ(h.take_request(f.y, "writer"), nullptr);
  h.request(f.y, f.norm_w);
  h.request(f.y, Tensor());  // withdrawn
  EXPECT_FALSE(h.has_request());
  EXPECT_EQ(h.take_request(f.y, "writer"), nullptr);
  EXPECT_EQ(h.take_handed(f.y, f.norm_w, "reader"), nullptr);
}

TEST(NormHandoff, AWriteBetweenIsAnError) {
  Fixture f;
  ops::NormHandoff h;
  h.request(f.y, f.norm_w);
  f.write_and_hand_on(h);
  ops::add(f.y, f.other, f.y);  // every op bumps the version of what it writes
  EXPECT_THROW(h.take_handed(f.y, f.norm_w, "reader"), Error);
}

TEST(NormHandoff, AnotherTensorOrNormWeightIsAnError) {
  Fixture f;
  {
    ops::NormHandoff h;
    h.request(f.y, f.norm_w);
    f.write_and_hand_on(h);
    EXPECT_THROW(h.take_handed(f.other, f.norm_w, "reader"), Error);
  }
  {
    ops::NormHandoff h;
    h.request(f.y, f.norm_w);
    f.write_and_hand_on(h);
    EXPECT_THROW(h.take_handed(f.y, f.other_w, "reader"), Error);
  }
  {
    // The same memory under another shape is another tensor.
    ops::NormHandoff h;
    h.request(f.y, f.norm_w);
    f.write_and_hand_on(h);
    EXPECT_THROW(h.take_handed(f.y.reshape({kDim, 1}), f.norm_w, "reader"), Error);
  }
  {
    ops::NormHandoff h;
    h.request(f.y, f.norm_w);
    EXPECT_THROW(h.take_request(f.other, "writer"), Error);
  }
}

TEST(NormHandoff, OpsThatWriteBumpTheVersion) {
  Fixture f;
  const uint64_t v0 = f.y.version();
  ops::add(f.y, f.other, f.y);
  ops::rms_norm(f.other, f.norm_w, 1e-5f, f.y);
  EXPECT_EQ(f.y.version(), v0 + 2);
  const Tensor view = f.y.slice(1, 0, kDim / 2);  // a view shares its storage's version
  EXPECT_EQ(view.version(), f.y.version());
}

// Through the ops on the CPU: the writer answers the request with nothing
// (only the GPU's decode GEMV writes the norm), the reader normalizes itself
// and gives the numbers of a run without the handoff; a reader given a
// handoff holding a norm of y written since fails instead of reading it.
TEST(NormHandoff, CpuOpsTakePartAndCheck) {
  Fixture f;
  const Tensor x = random_f32(1, kDim, 5), w = random_f32(kDim, kDim, 6), wq = random_f32(kDim, kDim, 7);
  auto step = [&](ops::NormHandoff* h) {
    Tensor y = random_f32(1, kDim, 8), scratch = Tensor::zeros(DType::F32, {1, kDim});
    Tensor normed = Tensor::zeros(DType::F32, {1, kDim}), q = Tensor::zeros(DType::F32, {1, kDim});
    if (h != nullptr) h->request(y, f.norm_w);
    ops::matmul_accumulate(x, w, y, scratch, {.hand_on = h});
    if (h != nullptr) {
      EXPECT_FALSE(h->has_request() || h->has_handed());
    }
    const Tensor* ws[] = {&wq};
    Tensor* ys[] = {&q};
    ops::matmul_group(y, {.weight = f.norm_w, .eps = 1e-5f, .normed = normed, .handoff = h}, ws, ys);
    return q;
  };
  ops::NormHandoff h;
  const Tensor want = step(nullptr), got = step(&h);
  for (int64_t i = 0; i < kDim; ++i) ASSERT_EQ(got.data_as<float>()[i], want.data_as<float>()[i]) << i;

  ops::NormHandoff stale;
  stale.request(f.y, f.norm_w);
  f.write_and_hand_on(stale);
  ops::add(f.y, f.other, f.y);
  Tensor normed = Tensor::zeros(DType::F32, {1, kDim}), q = Tensor::zeros(DType::F32, {1, kDim});
  const Tensor* ws[] = {&wq};
  Tensor* ys[] = {&q};
  EXPECT_THROW(ops::matmul_group(f.y, {.weight = f.norm_w, .eps = 1e-5f, .normed = normed, .handoff = &stale}, ws, ys),
               Error);
}

}  // namespace
}  // namespace brioche
