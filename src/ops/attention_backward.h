// Dense causal attention for training: forward that saves the per-row
// log-sum-exp, and its backward that recomputes the probabilities from it
// (O(L) saved state per head instead of the L×L matrix, flash-style).
//
// Rows are grouped into independent spans (sequences). Query row i of a span
// sees key row j of the same span when j ≤ i and
//   branch[j] == 0 || branch[j] == branch[i]
// (branch 0 is a shared prefix; branches 1, 2, ... are continuations that do
// not see each other: the block-sparse mask of the prefix-shared
// [prompt; chosen; rejected] forward). With a sliding window w, also
// positions[i] − positions[j] < w. GQA: query head h reads KV head
// h / (n_heads / n_kv_heads).
//
// Forward:   s_ij = scale · q_i·k_j,  lse_i = log Σ_j e^{s_ij},
//            p_ij = e^{s_ij − lse_i}, o_i = Σ_j p_ij v_j
// Backward:  dv_j = Σ_i p_ij do_i,  dp_ij = do_i·v_j,  D_i = do_i·o_i,
//            ds_ij = p_ij (dp_ij − D_i),
//            dq_i = scale Σ_j ds_ij k_j,  dk_j = scale Σ_i ds_ij q_i
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace brioche::ops {

struct AttentionSpan {
  int32_t first_row = 0;
  int32_t n_rows = 0;
};

struct DenseAttentionLayout {
  std::span<const AttentionSpan> spans;
  std::span<const uint8_t> branch;     // [n_rows]; empty = all 0 (plain causal)
  std::span<const int32_t> positions;  // [n_rows]; needed only with a sliding window
};

struct DenseAttentionParams {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;
  int sliding_window = 0;  // 0 = full causal
};

// q [n, H·d], k/v [n, KV·d]
struct DenseAttentionInputs {
  const Tensor& q;
  const Tensor& k;
  const Tensor& v;
};

// out [n, H·d], lse f32 [n, H] (written)
void dense_attention(const DenseAttentionInputs& in, const DenseAttentionLayout& layout,
                     const DenseAttentionParams& params, Tensor& out, Tensor& lse);

// What the backward reads besides q, k, v: the forward's out and lse, and
// dout, the gradient of the loss with respect to out ([n, H·d]).
struct DenseAttentionUpstream {
  const Tensor& out;
  const Tensor& lse;
  const Tensor& dout;
};

// dq [n, H·d], dk/dv [n, KV·d] are written (=).
struct DenseAttentionGrads {
  Tensor& dq;
  Tensor& dk;
  Tensor& dv;
};
void dense_attention_backward(const DenseAttentionInputs& in, const DenseAttentionUpstream& upstream,
                              const DenseAttentionLayout& layout, const DenseAttentionParams& params,
                              const DenseAttentionGrads& grads);

}  // namespace brioche::ops
