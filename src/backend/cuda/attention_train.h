// Training attention on tensor cores (attention_train*.cu): the CUDA side of
// ops::dense_attention / ops::dense_attention_backward (same semantics as
// backend/cpu/attention_backward.cpp: spans, causal, branch mask of the
// prefix-shared forward, sliding window over positions, GQA; see
// ops/attention_backward.h for the math).
//
// Forward: flash-style, a CTA per (64 query rows of a span, query head),
// online softmax, writes out and the per-row log-sum-exp. Backward (FA2
// style, probabilities recomputed from lse, O(L) memory) in two passes with
// no atomics: a CTA per (64 query rows, query head) accumulates dq, and a CTA
// per (64 key rows, KV head) accumulates dk and dv over the query heads of
// its GQA group. Inputs are rounded to bf16 as they are staged (mma.sync
// m16n8k16 bf16, f32 accumulators); the softmax and every accumulation are
// f32. head_dim 64 and 128; other sizes are an error naming the supported ones.
//
// Plain C++ (no CUDA headers); the kernels exist when BRIOCHE_CUDA=ON. The
// args carry device pointers for tensors and host spans for the layout.
#pragma once

#include "backend/cpu/attention_backward.h"

namespace brioche::cuda {

// Whether the CUDA training attention supports this head_dim (64, 128).
bool dense_attention_supports(int head_dim);

// Writes out_w [n, H·d] and lse_w [n, H] for the rows of the layout's spans.
void dense_attention(const backend::cpu::DenseAttentionArgs& args);
// Writes dq [n, H·d], dk/dv [n, KV·d] (=) for the rows of the layout's spans.
void dense_attention_backward(const backend::cpu::DenseAttentionArgs& args);

}  // namespace brioche::cuda
