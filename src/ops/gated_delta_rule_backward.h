// Backward of Qwen 3.5's Gated DeltaNet core for LoRA training: the gated
// delta rule (ops/gated_delta_rule.h, with its q/k L2 norms and 1/√dk) and
// the gates that feed it. A sequence starts from a zero state or continues a
// given one (a prefix-shared branch continues its prompt's), and a gradient
// may flow into the state after its last row (the prompt's, from its
// branches): the walk below then starts from that dS and ends with
// d of the initial state.
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
// The backward runs in the chunked form (backend/cpu/gated_delta_rule_chunk_backward.cpp
// has its math): per task (sequence, value head) the chunks run forward from
// the initial state keeping the state before each (dk·dv floats a chunk of
// kDeltaRuleChunk rows) and the chunk's deltas V', then backward, last chunk
// first, each a few small matrix products against the state and its
// gradient. The recurrent walk above (keeping the state every 32 rows and
// recomputing each block's states from it) stays as the reference
// (backend::cpu::GatedDeltaRuleBackwardArgs::chunk_size 1;
// BRIOCHE_CPU_DELTA_RULE_CHUNKED_BACKWARD=0 makes the op take it).
#pragma once

#include <span>

#include "core/tensor.h"
#include "ops/gated_delta_rule.h"
#include "ops/recurrent_sequence.h"

namespace brioche::ops {

// The forward's gradients (written, =; rows may be strided slices):
struct DeltaRuleGrads {
  Tensor& dq;     // f32 [n_rows, n_k_heads * key_dim]
  Tensor& dk;     // f32 [n_rows, n_k_heads * key_dim]
  Tensor& dv;     // f32 [n_rows, n_v_heads * value_dim]
  Tensor& dg;     // f32 [n_rows, n_v_heads]
  Tensor& dbeta;  // f32 [n_rows, n_v_heads]
};

// The states around the sequences, all f32 [n_slots, n_v_heads, key_dim, value_dim]
// indexed by the sequences' state slots:
struct DeltaRuleStateGrads {
  const Tensor* initial_state = nullptr;  // read for sequences that do not start (required if any)
  Tensor* d_initial_state = nullptr;      // written at those sequences' slots (null: not wanted)
  const Tensor* d_final_state = nullptr;  // d loss / d the state after each sequence (null: 0)
};

// in: the forward's inputs (q, k before their norms); dout: d loss / d out
// [n_rows, n_v_heads * value_dim]. Rows in no sequence are left as they
// are. CPU only.
void gated_delta_rule_backward(const DeltaRuleInputs& in, const DeltaRuleShape& shape,
                               std::span<const RecurrentSequence> sequences, const Tensor& dout,
                               const DeltaRuleGrads& grads, const DeltaRuleStateGrads& states = {});

// Backward of delta_rule_gates (g = −e^{a_log}·softplus(a + dt_bias), β = σ(b)):
//   da = dg · (−e^{a_log}) · σ(a + dt_bias),   db = dβ · β(1 − β)
// da, db f32 [n_rows, n_v_heads] written.
void delta_rule_gates_backward(const Tensor& a, const Tensor& b, const DeltaRuleGateWeights& w, const Tensor& dg,
                               const Tensor& dbeta, Tensor& da, Tensor& db);

}  // namespace brioche::ops
