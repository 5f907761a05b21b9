// Causal multi-head attention over a paged KV cache, for a ragged batch.
//
// The cache of one layer holds K and V as [n_blocks, block_size, n_kv_heads,
// head_dim] (f32 or f16). A sequence's position p lives in block
// block_table[p / block_size], slot p % block_size. Query row i of a sequence
// sits at position n_past + i and attends to positions [0, n_past + i]
// (or the last `sliding_window` of them), with GQA: query head h reads KV
// head h / (n_heads / n_kv_heads).
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "ops/norm_handoff.h"
#include "ops/rope.h"

namespace brioche::ops {

struct AttentionSequence {
  int32_t first_row = 0;                 // first batch row of the sequence
  int32_t n_rows = 0;                    // its rows in this batch
  int32_t n_past = 0;                    // positions already cached before them
  std::span<const int32_t> block_table;  // covers [0, n_past + n_rows)
};

struct AttentionParams {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;      // usually 1/sqrt(head_dim)
  int sliding_window = 0;  // attend only to keys with p − key < window; 0 = all
};

// One layer's paged cache as attention reads it, and the batch's sequences
// in it. k, v : [n_blocks, block_size, n_kv_heads, head_dim], f32 or f16
struct PagedKvView {
  const Tensor& k;
  const Tensor& v;
  std::span<const AttentionSequence> sequences;
};

// The same, for the ops that also write the batch's keys and values into it.
struct PagedKvCache {
  Tensor& k;
  Tensor& v;
  std::span<const AttentionSequence> sequences;

  operator PagedKvView() const { return {.k = k, .v = v, .sequences = sequences}; }
};

// Writes the batch's new keys/values into the cache at each row's position.
//   k, v    : f32 [n_rows, n_kv_heads * head_dim]
//   k_cache, v_cache : [n_blocks, block_size, n_kv_heads, head_dim], f32 or f16
void store_kv(const Tensor& k, const Tensor& v, std::span<const AttentionSequence> sequences, Tensor& k_cache,
              Tensor& v_cache);

// rope_store_kv's arguments besides q and the cache: the step before a
// layer's attention, which paged_attention can take in.
struct RopeStoreKvFirst {
  Tensor& k;                           // f32 [n_rows, n_kv_heads * head_dim]
  const Tensor& v;                     // f32 [n_rows, n_kv_heads * head_dim]
  std::span<const int32_t> positions;  // [n_rows]
  const RopeParams& q_rope;
};

// rope(q), rope(k) (with q_rope's rotation, k's heads from the cache), then
// store_kv(k, v): the step between a layer's QKV projection and its
// attention. One kernel on CUDA; the same results as the three calls.
void rope_store_kv(Tensor& q, const RopeStoreKvFirst& first, const PagedKvCache& cache);

// rope_store_kv(q, first, cache), then paged_attention. On CUDA, when every
// sequence brings one row at its n_past (a decode step), one kernel: its
// CTAs rotate q in registers and store the rotated K and V themselves,
// leaving q and k unrotated in memory (the same output and cache bits).
void paged_attention(Tensor& q, const RopeStoreKvFirst& first, const PagedKvCache& cache, const AttentionParams& params,
                     Tensor& out);

// The step after a layer's attention that paged_attention can take in: the
// output projection with its residual add, matmul_accumulate(x, w, y,
// scratch) (ops/fused_matmul.h), x being the attention's output.
struct ProjectAccumulateThen {
  Tensor& x;  // the attention's output [n_rows, n_heads * head_dim] (see below for when it is written)
  const Tensor& w;
  Tensor& y;
  Tensor& scratch;
  NormHandoff* hand_on = nullptr;  // as matmul_accumulate's (ops/norm_handoff.h)
};

// paged_attention(q, first, cache, params, then.x), then
// matmul_accumulate(then.x, then.w, then.y, then.scratch). On CUDA, where the
// projection is a GEMM reading 16-bit rows (above 8 rows), attention writes
// those rows itself (the bits the conversion of `then.x` would give) and
// `then.x` is not written; where it is a GEMV on int8 activations (up to 8
// rows of the int8 path's quantized types), attention writes those (the
// bits of the GEMV's own quantization) and `then.x` is not written either.
void paged_attention(Tensor& q, const RopeStoreKvFirst& first, const PagedKvCache& cache, const AttentionParams& params,
                     const ProjectAccumulateThen& then);

// out[r, h·d:(h+1)·d] = Σ_j softmax_j(scale · q_h·k_j) v_j over the row's
// visible positions j (already in the cache: call store_kv first).
//   q   : f32 [n_rows, n_heads * head_dim]
//   out : f32 [n_rows, n_heads * head_dim]
// Rows not covered by any sequence are left untouched.
void paged_attention(const Tensor& q, const PagedKvView& cache, const AttentionParams& params, Tensor& out);

}  // namespace brioche::ops
