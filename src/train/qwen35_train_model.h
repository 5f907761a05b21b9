// Qwen 3.5's dense text model for LoRA training (model/qwen35.cpp has the
// architecture), on the CPU: the forward saves what the backward needs, the
// backward accumulates LoRA gradients on the gated attention's q/k/v/o, the
// Gated DeltaNet's in_proj_qkv/in_proj_z/in_proj_b/in_proj_a/out_proj and
// the MLP's gate/up/down (peft's module names). Per layer, with
// RMSNorm(x, w) = x·(mean(x²) + eps)^−½ ⊙ w (w stored as 1 + w):
//
//   h1 = RMSNorm(x_in, input_layernorm)
//   linear layers (Gated DeltaNet):
//     qkv, z, b, a = lora(h1)
//     mixed = silu(causal_conv1d(qkv))                    ops/causal_conv1d_backward.h
//     g = −e^{A_log}·softplus(a + dt_bias),  β = σ(b)
//     core = gated_delta_rule(split(mixed), g, β)         ops/gated_delta_rule_backward.h
//     o = lora_out(RMSNorm(core per value head, norm) ⊙ silu(z))
//   full-attention layers:
//     [q | gate] per head, k, v = lora(h1)
//     q, k = RMSNorm per head, RoPE on the first rotary_dim dims of each head
//     o = lora_o(attention(q, k, v; scale d^−½) ⊙ σ(gate))
//   x_mid = x_in + o;  h2 = RMSNorm(x_mid, post_attention_layernorm)
//   x_out = x_mid + lora_down(silu(lora_gate(h2)) ⊙ lora_up(h2))
// In qwen3_5_moe the MLP is the MoE block:
//   x_out = x_mid + Σ_k w_k·expert_k(h2) + σ(lora_sg(h2))·shared_expert(h2)
//   expert_e: LoRA per expert on experts.gate_up_proj (the delta's gate rows, then up rows) and
//   experts.down_proj (expert_lora.h: only rows routed to e see its factors); shared_expert:
//   gate_proj/up_proj/down_proj with LoRA as the dense MLP's
//   w = softmax(router logits) over all experts, top k, renormalised: the
//   softmax of the top-k logits, so dz_k = w_k·(g_k − Σ_j w_j·g_j), g_k = d out·expert_k(h2)
//   shared gate: d c = Σ d out ⊙ shared·σ(c)(1 − σ(c)) (ops::sigmoid_gate_backward)
//
// Prefix-shared preference pairs ([prompt; chosen; rejected] in one span,
// batch_builder.h): the prompt runs once from a zero state; each branch
// continues the prompt's conv inputs and delta-rule state (in its own state
// slot), and the full-attention layers read the prompt's K/V. Backward: the
// branches first, giving d of the state each started from; their sum is the
// gradient of the prompt's final state (and of its last K−1 conv inputs),
// with which the prompt's backward starts.
#pragma once

#include <array>
#include <vector>

#include "model/qwen35_weights.h"
#include "ops/recurrent_sequence.h"
#include "train/lora.h"
#include "train/lora_linear.h"
#include "train/train_stack.h"

namespace brioche::train {

// Each layer's projection shapes: q/k/v/o on full-attention layers, the five
// linear-attention projections on linear layers, gate/up/down on all.
LoraShapes qwen35_lora_shapes(const model::Qwen35Checkpoint& checkpoint);
LoraShapes qwen35_lora_shapes(const model::ModelConfig& config, const model::Qwen35Config& qwen);

class Qwen35TrainModel final : public TrainStack {
 public:
  Qwen35TrainModel(const model::Qwen35Checkpoint& checkpoint, LoraAdapter* adapter);

  const model::ModelConfig& config() const override { return ck_.config; }
  int first_trainable_layer() const override;
  Tensor frozen_prefix(const TokenBatch& batch) const override;
  Tensor forward(const TokenBatch& batch, const Tensor& prefix_out, const ForwardOptions& options) override;
  using TrainStack::forward;
  void backward(Tensor d_hidden) override;
  size_t saved_bytes() const override;
  Device device() const override { return Device::CPU; }

  // Saved activations of one layer (f32 [n, ...]).
  struct Cache {
    Tensor x_in, h1;
    // Gated DeltaNet
    Tensor qkv, mixed, z, a, b, g, beta, core, normed, gated;
    Tensor root_state, root_conv;  // prefix-shared: each root's state after it, [R, vh, dk, dv] and [R, K−1, C]
    // Gated attention
    Tensor q_gate, k_lin, v, q, k, attn, lse, attn_gated;
    // MLP
    Tensor x_mid, h2, gate, up, act;
    std::array<Tensor, kNumModules> lora_u;
    // MoE block (qwen3_5_moe)
    Tensor router_logits;               // [n, E]
    std::vector<int32_t> route_expert;  // [n·top_k]
    std::vector<float> route_weight;    // [n·top_k]
    struct Expert {
      std::vector<int32_t> rows, slots;  // the batch rows routed to it, their (row·top_k + k) slots
      std::vector<float> weights;
      Tensor gate, up, y;        // [m, I] x2, [m, hidden] (y before the routing weight)
      Tensor in, act;            // [m, hidden], [m, I]: kept where experts.gate_up_proj / down_proj have LoRA
      Tensor u_gate_up, u_down;  // [m, r] expert LoRA's u
    };
    std::vector<Expert> experts;
    Tensor shared_gate, shared_up, shared_act, shared_out, shared_logit;  // [n, SI] x3, [n, hidden], [n, 1]
  };

 private:
  struct Pass {  // what every layer of one forward sees
    const TokenBatch& batch;
    ops::DenseAttentionLayout layout;
    // Roots (an unshared span, or a prefix-shared span's prompt), starting
    // from a zero state in slots 0..R−1; branches (a prompt's chosen and
    // rejected rows) in slots 0..B−1 of their own state tensors, continuing
    // the state of root branch_root[b].
    std::vector<ops::RecurrentSequence> sequences, branches;
    std::vector<int32_t> branch_root;
    std::vector<int32_t> q_positions, k_positions;  // per (row, head): the partial RoPE sees one head per row
    uint64_t dropout_seed = 0;
    bool adapter_enabled = true;
    bool lora_dropout = true;
  };
  Pass make_pass(const TokenBatch& batch, const ForwardOptions& options) const;
  Tensor embed(const TokenBatch& batch) const;
  void layer_forward(const Pass& pass, int layer, Tensor& x, Cache& c) const;
  void linear_forward(const Pass& pass, int layer, Cache& c, Tensor& out) const;
  void full_forward(const Pass& pass, int layer, Cache& c, Tensor& out) const;
  // dx: d x_out in, d x_in out.
  void layer_backward(const Pass& pass, int layer, Cache& c, Tensor& dx);
  // d_out: d loss / d the mixer's output; adds d h1's contribution into d_h1 (written).
  void linear_backward(const Pass& pass, int layer, Cache& c, const Tensor& d_out, Tensor& d_h1);
  void full_backward(const Pass& pass, int layer, Cache& c, const Tensor& d_out, Tensor& d_h1);
  // The MoE block from c.h2 into out (saving what its backward needs); its backward writes d_h2.
  // LoRA on the experts (experts.gate_up_proj/down_proj), the shared expert's gate/up/down and its gate
  // (shared_expert_gate) where `sites` adapts them.
  void moe_forward(const LayerSites& sites, Cache& c, Tensor& out) const;
  void moe_backward(const LayerSites& sites, Cache& c, const Tensor& d_out, Tensor& d_h2) const;

  const model::Qwen35Checkpoint& ck_;
  LoraAdapter* adapter_;
  std::vector<float> inv_freq_;            // [rotary_dim / 2]
  std::vector<float> unit_expert_scales_;  // [n_experts] of 1 (ops::moe_route)

  // Saved by forward(for_backward) for backward().
  const TokenBatch* batch_ = nullptr;
  ForwardOptions options_;
  std::vector<Cache> caches_;  // per layer from first_trainable_layer()
  Tensor x_final_;
};

}  // namespace brioche::train
