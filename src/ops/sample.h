// Token sampling on the logits' device (backend/cuda/sampling.h): the
// engine's sampling pipeline for a batch of rows, only ids and requested
// logprobs copied back. CUDA only: CPU logits are sampled by
// engine::Sampler, the reference these kernels are tested against.
#pragma once

#include <span>

#include "backend/cuda/sampling.h"
#include "core/tensor.h"

namespace brioche::ops {

// results[i] for batch.rows[i]; blocks until they are on the host.
//   logits : CUDA f32 [n, vocab] with contiguous rows, vocab == batch.vocab
void sample_rows(const Tensor& logits, const cuda::SampleBatch& batch, std::span<cuda::SampleResult> results);

}  // namespace brioche::ops
