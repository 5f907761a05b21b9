// Fused log-prob head: per-token log-probabilities through the frozen LM head
// without ever holding [tokens, V] logits (vocab-tiled, online log-sum-exp).
//
//   z = h·Wᵀ,  lse_i = log Σ_v e^{z_iv},  logp_i = z_{i,t_i} − lse_i
//   forward, per vocab chunk [v0, v1): z_c = h·W[v0:v1]ᵀ   // [n, chunk]
//     running max m and sum s:  m' = max(m, max z_c),  s ← s·e^{m−m'} + Σ e^{z_c−m'}
//     the target's logit is picked up from the chunk that holds it
//   backward, per chunk: recompute z_c, form
//     dz_iv = d_logp_i · (1[v = t_i] − e^{z_iv − lse_i})
//     and accumulate dh += dz_c · W[v0:v1]
// Memory: one [n, chunk] f32 tile (+ its 16-bit copy on CUDA) and the
// dequantized weight chunk. On CUDA h is rounded to bf16 once for all chunk
// GEMMs (f32 GEMMs for f32 weights), dz is written as bf16 for the dh GEMM;
// accumulation is f32 throughout.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "ops/linear_backward.h"

namespace brioche::ops {

struct LogpHeadArgs {
  const Tensor& hidden;              // f32 [n, H] the scored rows (see gather_rows), rows contiguous
  const Tensor& weight;              // [V, H] any dtype (f32, f16, bf16, quantized), same device
  std::span<const int32_t> targets;  // [n] host: the token scored from row i, in [0, V)
  int64_t chunk = 4096;              // vocabulary rows per tile
};

// lse, logp : f32 [n] on hidden's device, written.
void logp_head_forward(const LogpHeadArgs& args, Tensor& lse, Tensor& logp);

// d_hidden (=|+=) Σ_v dz_iv · W_v with dz from d_logp and the forward's lse.
//   lse, d_logp : f32 [n];  d_hidden : f32 [n, H]; all on hidden's device
void logp_head_backward(const LogpHeadArgs& args, const Tensor& lse, const Tensor& d_logp, Tensor& d_hidden,
                        GradWrite mode);

}  // namespace brioche::ops
