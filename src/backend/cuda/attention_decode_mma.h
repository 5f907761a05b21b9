// Decode attention on tensor cores (attention_decode_mma.cu): batches of
// decode rows with an f16 cache take it instead of attention.cu's CUDA-core
// kernel. This header is the host-side rule, for the dispatch and the tests.
//
// Plain C++ (no CUDA headers); the kernel exists when BRIOCHE_CUDA=ON.
#pragma once

namespace brioche::cuda {

// A launch of at least this many rows is a batch (one row per sequence in a
// decode step).
constexpr int kMmaMinRows = 8;

// Whether the tensor-core kernel serves a paged_attention launch: an f16
// cache of power-of-two blocks, head_dim 64 or 128, at most 8 query heads
// per KV head, at least kMmaMinRows rows. BRIOCHE_CUDA_DECODE_MMA=0 turns it
// off (A/B runs).
bool attention_mma_takes(bool f16_cache, int block_size, int head_dim, int group, int n_rows);

}  // namespace brioche::cuda
