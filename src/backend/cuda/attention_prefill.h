// Flash-style prefill attention on tensor cores (attention_prefill.cu), for
// the sequences of a paged_attention call that bring many query rows: a CTA
// takes 64 rows of one sequence and one query head and walks its keys in
// tiles of 64 through shared memory (mma.sync m16n8k16, f16 inputs, f32
// accumulators, online base-2 softmax). Decode rows stay on the paged kernel
// of attention.cu, which calls this first and runs the sequences it returns.
//
// Plain C++ (no CUDA headers); the kernel exists when BRIOCHE_CUDA=ON.
#pragma once

#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cuda/kernels.h"

namespace brioche::cuda {

// A sequence with at least this many query rows in a call is prefill work.
constexpr int kPrefillMinRows = 16;

// Whether the prefill kernel serves sequence `seq` of the call `args`: an f16
// cache, head_dim 64 or 128, a power-of-two block size, at least
// kPrefillMinRows rows. The environment
// variable BRIOCHE_CUDA_PREFILL_ATTENTION=0 turns the kernel off (A/B runs).
bool prefill_attention_takes(const backend::cpu::PagedAttentionArgs& args, const backend::cpu::KvSequence& seq);

// Queues the prefill kernel for the sequences it takes and returns the others,
// in their order, for the paged kernel. Rows of no taken sequence are not
// written. With out16.rows the output goes there, rounded to 16 bits
// (kernels.h).
std::vector<backend::cpu::KvSequence> prefill_attention(const backend::cpu::PagedAttentionArgs& args,
                                                        AttentionOut16 out16);

}  // namespace brioche::cuda
