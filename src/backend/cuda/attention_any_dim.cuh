// Paged attention for the shapes the fast decode kernels of attention.cu do
// not take: head dims other than 64, 128 and 256 (Gemma 4's full layers
// have 512; small test models 16 and 32) and more than 8 query heads per KV
// head. Same AttnParams, same semantics (causal, sliding window, GQA, rows
// no sequence covers left untouched, the output as f32 or 16-bit rows); no
// RoPE taken in, no int8 output, no splits.
#pragma once

#include "backend/cuda/attention_paged.cuh"

namespace brioche::cuda::paged {

// The largest head_dim attention_any_dim takes.
inline constexpr int kAnyDimMaxHeadDim = 512;

// Whether the fast kernels (attention.cu's CUDA-core kernel, the
// tensor-core one) take this shape; else attend_any_dim.
inline bool fast_attention_takes(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256) && group <= 8;
}

// One CTA per (row, query head), 4 warps striding over the row's keys, a
// warp's lanes splitting head_dim; the warps merge in shared memory. p.splits
// must be 1 and p.new_k, p.int8.q null; the cache is f16 or f32.
void attend_any_dim(const AttnParams& p, bool f16_cache);

}  // namespace brioche::cuda::paged
