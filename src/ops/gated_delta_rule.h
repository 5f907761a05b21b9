// The gated delta rule (Gated DeltaNet, Yang et al. 2024) in the recurrent
// form, over a ragged batch whose sequences carry their state in a slot:
// Qwen 3.5's linear-attention layers (transformers'
// torch_recurrent_gated_delta_rule with use_qk_l2norm_in_kernel=True).
//
// Per value head h (its key head kh = h / (n_v_heads / n_k_heads)), with the
// state S ∈ R^{dk×dv}, at each row t of a sequence:
//   q = l2norm(q_t[kh]) / √dk,  k = l2norm(k_t[kh])   (l2norm(x) = x / √(Σx² + 1e-6))
//   S ← exp(g_t[h]) · S                               (decay, g ≤ 0)
//   δ = β_t[h] · (v_t[h] − Sᵀk)                       (the delta: what S mispredicts)
//   S ← S + k δᵀ
//   out_t[h] = Sᵀq
// The chunked form (transformers' torch_chunk_gated_delta_rule, used for
// prefill there) computes the same quantities by blocks of 64 rows; this
// exact per-row form is the CPU reference.
#pragma once

#include <span>

#include "core/tensor.h"
#include "ops/recurrent_sequence.h"

namespace brioche::ops {

struct DeltaRuleShape {
  int n_k_heads = 0;
  int n_v_heads = 0;  // a multiple of n_k_heads
  int key_dim = 0;
  int value_dim = 0;
};

// The rule's per-row inputs (rows may be strided).
struct DeltaRuleInputs {
  const Tensor& q;     // f32 [n_rows, n_k_heads * key_dim]
  const Tensor& k;     // f32 [n_rows, n_k_heads * key_dim]
  const Tensor& v;     // f32 [n_rows, n_v_heads * value_dim]
  const Tensor& g;     // f32 [n_rows, n_v_heads]   log of the decay
  const Tensor& beta;  // f32 [n_rows, n_v_heads]   write strength
};

//   state : f32 [n_slots, n_v_heads, key_dim, value_dim], per sequence slot
//   out   : f32 [n_rows, n_v_heads * value_dim]
// Rows in no sequence are left untouched. CPU and CUDA (backend/cuda/gated_delta_rule.cu).
void gated_delta_rule(const DeltaRuleInputs& in, const DeltaRuleShape& shape,
                      std::span<const RecurrentSequence> sequences, Tensor& state, Tensor& out);

// Qwen 3.5's gates from the projections a and b (f32 [n_rows, n_v_heads]):
//   g    = −exp(a_log[h]) · softplus(a + dt_bias[h])
//   beta = sigmoid(b)
// g, beta: f32 [n_rows, n_v_heads].  CPU and CUDA.
struct DeltaRuleGateWeights {
  const Tensor& a_log;    // f32 [n_v_heads]
  const Tensor& dt_bias;  // f32 [n_v_heads]
};
void delta_rule_gates(const Tensor& a, const Tensor& b, const DeltaRuleGateWeights& w, Tensor& g, Tensor& beta);

}  // namespace brioche::ops
