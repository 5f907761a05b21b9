#include "ops/sample.h"

#include "core/error.h"

namespace brioche::ops {

void sample_rows(const Tensor& logits, const cuda::SampleBatch& batch, std::span<cuda::SampleResult> results) {
  BRIOCHE_CHECK(logits.rank() == 2 && logits.dtype() == DType::F32 && logits.stride(1) == 4,
                "sample_rows: logits must be f32 [n, vocab] with contiguous rows, got ", logits.describe());
  BRIOCHE_CHECK(logits.dim(1) == batch.vocab, "sample_rows: logits have ", logits.dim(1), " columns, the batch expects vocab ",
                batch.vocab);
  for (const cuda::SampleRowParams& row : batch.rows) {
    BRIOCHE_CHECK(row.logit_row >= 0 && row.logit_row < logits.dim(0), "sample_rows: logit row ", row.logit_row,
                  " outside the ", logits.dim(0), " rows of ", logits.describe());
  }
  BRIOCHE_CHECK(logits.device() == Device::CUDA, "sample_rows: expected CUDA logits (host logits are sampled by engine::Sampler), got ",
                logits.describe());
#if BRIOCHE_CUDA
  cuda::sample_rows({.logits = logits.data_as<float>(),
                     .logits_stride = logits.stride(0) / 4,
                     .batch = &batch,
                     .results = results});
#else
  (void)results;
  fail("sample_rows: a CUDA tensor was requested but this build has no CUDA backend (configure with --preset cuda)");
#endif
}

}  // namespace brioche::ops
