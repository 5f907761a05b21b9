// Token sampling on the logits' device (backend/cuda/sampling.h): the
// engine's sampling pipeline for a batch of rows, only ids and requested
// logprobs copied back. CUDA only: CPU logits are sampled by
// engine::Sampler, the reference these kernels are tested against.
#pragma once

#include <memory>
#include <span>

#include "backend/cuda/sampling.h"
#include "core/tensor.h"

namespace brioche::ops {

// One batch's sampling at a time, launched without waiting (cuda::SampleRun):
//
//   run.launch(logits, batch);   // queued; the host goes on
//   Tensor ids = run.tokens();   // i32 [rows] on the device, for work queued next
//   run.collect(results);        // waits for this launch alone
class SampleRun {
 public:
  //   logits : CUDA f32 [n, vocab] with contiguous rows, vocab == batch.vocab
  void launch(const Tensor& logits, const cuda::SampleBatch& batch);
  // The last launch's sampled ids: CUDA i32 [rows], 0 for a row without a token.
  Tensor tokens() const;
  // results[i] for the last launch's row i; blocks until they are on the host.
  void collect(std::span<cuda::SampleResult> results);

 private:
#if BRIOCHE_CUDA  // (defined for every unit of a CUDA build: CMakeLists.txt)
  cuda::SampleRun run_;
#endif
  int64_t rows_ = 0;
};

}  // namespace brioche::ops
