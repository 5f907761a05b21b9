// Backward of Qwen 3.5's Gated DeltaNet core for LoRA training: the gated
// delta rule (ops/gated_delta_rule.h, with its q/k L2 norms and 1/√dk) and
// the gates that feed it. Every sequence starts from a zero state (training
// sequences are whole), so nothing flows into an initial state.
//
// Per value head, with q̂ = l2norm(q)/√dk, k̂ = l2norm(k), α_t = e^{g_t}:
//   S'_t = α_t·S_{t−1},  u_t = v_t − S'_tᵀk̂_t,  δ_t = β_t·u_t
//   S_t  = S'_t + k̂_t δ_tᵀ,  o_t = S_tᵀq̂_t
// Walking t backward with dS the gradient of S_t from the rows after t:
//   dS   += q̂_t do_tᵀ;        dq̂_t = S_t do_t
//   dδ    = dSᵀk̂_t;           dk̂_t = dS δ_t
//   dβ_t  = dδ·u_t;           dv_t = β_t dδ;   e = −β_t dδ  (d of S'ᵀk̂)
//   dk̂_t += S'_t e;           dS'  = dS + k̂_t eᵀ
//   dg_t  = ⟨dS', S'_t⟩;       dS_{t−1} = α_t dS'
// then through the norms: y = x·r, r = (Σx² + 1e-6)^−½ ⇒ dx = r·dy − x·r³·(x·dy),
// the value heads of one key head adding their dq̂, dk̂.
//
// The backward needs S_{t−1} at every row. Storing all of them costs
// dk·dv floats per row and head (64 KB at 128²), so the forward keeps
// nothing: the backward runs the recurrence once keeping the state at every
// kDeltaRuleBackwardRows-th row (a checkpoint), then per block of rows, last
// block first, recomputes the block's states from its checkpoint and walks
// it backward: about two forwards' work plus the backward, with
// (len / rows + rows + 1)·dk·dv floats per task.
#pragma once

#include <span>

#include "core/tensor.h"
#include "ops/gated_delta_rule.h"
#include "ops/recurrent_sequence.h"

namespace brioche::ops {

inline constexpr int kDeltaRuleBackwardRows = 32;

// The forward's gradients (written, =; rows may be strided slices):
struct DeltaRuleGrads {
  Tensor& dq;     // f32 [n_rows, n_k_heads * key_dim]
  Tensor& dk;     // f32 [n_rows, n_k_heads * key_dim]
  Tensor& dv;     // f32 [n_rows, n_v_heads * value_dim]
  Tensor& dg;     // f32 [n_rows, n_v_heads]
  Tensor& dbeta;  // f32 [n_rows, n_v_heads]
};

// in: the forward's inputs (q, k before their norms); dout: d loss / d out
// [n_rows, n_v_heads * value_dim]. Every sequence must start (starts = true);
// rows in no sequence get zero gradients. CPU only.
void gated_delta_rule_backward(const DeltaRuleInputs& in, const DeltaRuleShape& shape,
                               std::span<const RecurrentSequence> sequences, const Tensor& dout,
                               const DeltaRuleGrads& grads);

// Backward of delta_rule_gates (g = −e^{a_log}·softplus(a + dt_bias), β = σ(b)):
//   da = dg · (−e^{a_log}) · σ(a + dt_bias),   db = dβ · β(1 − β)
// da, db f32 [n_rows, n_v_heads] written.
void delta_rule_gates_backward(const Tensor& a, const Tensor& b, const DeltaRuleGateWeights& w, const Tensor& dg,
                               const Tensor& dbeta, Tensor& da, Tensor& db);

}  // namespace brioche::ops
