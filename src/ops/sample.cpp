#include "ops/sample.h"

#include "core/error.h"

namespace brioche::ops {

#if !BRIOCHE_CUDA
namespace {

[[noreturn]] void no_cuda(const char* what) {
  fail(what, ": a CUDA tensor was requested but this build has no CUDA backend (configure with --preset cuda)");
}

}  // namespace
#endif

void SampleRun::launch(const Tensor& logits, const cuda::SampleBatch& batch) {
  BRIOCHE_CHECK(logits.rank() == 2 && logits.dtype() == DType::F32 && logits.stride(1) == 4,
                "SampleRun::launch: logits must be f32 [n, vocab] with contiguous rows, got ", logits.describe());
  BRIOCHE_CHECK(logits.dim(1) == batch.vocab, "SampleRun::launch: logits have ", logits.dim(1),
                " columns, the batch expects vocab ", batch.vocab);
  for (const cuda::SampleRowParams& row : batch.rows) {
    BRIOCHE_CHECK(row.logit_row >= 0 && row.logit_row < logits.dim(0), "SampleRun::launch: logit row ", row.logit_row,
                  " outside the ", logits.dim(0), " rows of ", logits.describe());
  }
  BRIOCHE_CHECK(logits.device() == Device::CUDA,
                "SampleRun::launch: expected CUDA logits (host logits are sampled by engine::Sampler), got ",
                logits.describe());
#if BRIOCHE_CUDA
  run_.launch({.logits = logits.data_as<float>(), .logits_stride = logits.stride(0) / 4, .batch = &batch});
  rows_ = int64_t(batch.rows.size());
#else
  no_cuda("SampleRun::launch");
#endif
}

Tensor SampleRun::tokens() const {
#if BRIOCHE_CUDA
  BRIOCHE_CHECK(run_.tokens() != nullptr, "SampleRun::tokens: nothing was launched");
  return Tensor::view(const_cast<int32_t*>(run_.tokens()), DType::I32, {rows_}, nullptr, Device::CUDA);
#else
  no_cuda("SampleRun::tokens");
#endif
}

void SampleRun::collect(std::span<cuda::SampleResult> results) {
#if BRIOCHE_CUDA
  run_.collect(results);
#else
  (void)results;
  no_cuda("SampleRun::collect");
#endif
}

}  // namespace brioche::ops
