// Gemma 4's text model for LoRA training (model/gemma4.cpp has the
// architecture), on the CPU: the forward saves what the backward needs, the
// backward accumulates LoRA gradients on q/k/v/o and the dense MLP's
// gate/up/down. Per layer, with RMSNorm(x, w) = x·(mean(x²) + eps)^−½ ⊙ w:
//
//   h1 = RMSNorm(x_in, input_layernorm);  q, k, v = lora(h1)
//   q, k, v normed per head (v without scale), q and k rotated
//   a = attention(q, k, v) (scale 1, sliding window on sliding layers)
//   o = lora_o(a);  x_mid = x_in + RMSNorm(o, post_attention_layernorm)
//   h2 = RMSNorm(x_mid, pre_feedforward_layernorm)
//   m = lora_down(gelu_tanh(lora_gate(h2)) ⊙ lora_up(h2))
//   x2 = x_mid + RMSNorm(m, post_feedforward_layernorm)
//   x3 = x2 + RMSNorm(per_layer_projection·(gelu_tanh(per_layer_input_gate·x2) ⊙ ple_i), ...)
//   x_out = layer_scalar · x3
// KV-shared layers attend over their source layer's K/V (normed and rotated),
// so their dK/dV are added to the source layer's before its backward. The
// per-layer inputs ple depend only on the tokens (embeddings are frozen):
// no gradient flows into them. With the MoE block, m is
// RMSNorm(dense m, n1) + RMSNorm(Σ_k w_k·expert_k(RMSNorm(x_mid, pre_ffn_norm_2)), n2),
// expert_e(x) = (W_e,down + s·B·A)·(gelu_tanh(g) ⊙ u), [g | u] = (W_e,gate_up + s·B·A)·x
// with LoRA per expert on experts.gate_up_proj / experts.down_proj (expert_lora.h,
// only the rows routed to e see its factors); gradients flow through the experts and the
// router: w = softmax over the top-k logits · per_expert_scale, so
// dz_k = q_k·(g_k − Σ_j q_j·g_j) with q the top-k softmax, g_k = dw_k·scale.
#pragma once

#include <array>
#include <vector>

#include "model/gemma4_weights.h"
#include "train/lora.h"
#include "train/lora_linear.h"
#include "train/train_stack.h"

namespace brioche::train {

// The projections' shapes in each Gemma 4 layer (per-layer head dims, kv
// heads and MLP widths; {0, 0} for k_proj/v_proj of KV-shared layers and
// v_proj of attention_k_eq_v full layers, which have none).
LoraShapes gemma4_lora_shapes(const model::Gemma4Config& config);

class Gemma4TrainModel final : public TrainStack {
 public:
  // segment_size > 0: the segmented backward (train_model.h): the forward keeps the residual at every
  // segment_size-th trainable layer, and the K/V of layers a KV-shared layer of a later segment reads; the
  // backward recomputes one segment at a time (dK/dV of KV-shared layers wait in dk_/dv_ for their source).
  Gemma4TrainModel(const model::Gemma4Checkpoint& checkpoint, LoraAdapter* adapter, int segment_size = 0);

  const model::ModelConfig& config() const override { return ck_.config.base; }
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
    Tensor q_lin, k_lin, v_lin;  // projections before the per-head norms (k/v: own-KV layers only)
    Tensor q, k, v;              // normed and rotated; k/v are the source layer's in KV-shared layers
    Tensor attn, lse, o;
    Tensor x_mid, h2, gate, up, act, m;
    Tensor x2, ple_gate, ple_act, ple_out;  // per-layer inputs (P > 0)
    std::array<Tensor, kNumModules> lora_u;
    // MoE block (enable_moe_block): m above is then the sum of the normed dense and expert outputs.
    Tensor dense;                       // [n, hidden] the dense MLP's down output
    Tensor router_logits, e_in;         // [n, E], [n, hidden] the experts' normed input
    std::vector<int32_t> route_expert;  // [n·top_k]
    std::vector<float> route_weight;    // [n·top_k]
    struct Expert {
      std::vector<int32_t> rows, slots;  // the batch rows routed to it, their (row·top_k + k) slots
      std::vector<float> weights;
      Tensor gate_up, act, y;    // [m, 2I], [m, I], [m, hidden] (y before the routing weight)
      Tensor in;                 // [m, hidden] the routed rows of e_in (kept where gate_up_proj has LoRA)
      Tensor u_gate_up, u_down;  // [m, r] expert LoRA's u (experts.gate_up_proj, experts.down_proj)
    };
    std::vector<Expert> experts;
    Tensor moe_out;  // [n, hidden] Σ weight·expert output
  };

 private:
  struct Pass {  // what every layer of one forward sees
    const TokenBatch& batch;
    ops::DenseAttentionLayout layout;
    Tensor ple;  // [n, L·P] or undefined
    uint64_t dropout_seed = 0;
    bool adapter_enabled = true;
    bool lora_dropout = true;
  };
  Tensor embed(const TokenBatch& batch) const;
  Tensor per_layer_inputs(const TokenBatch& batch) const;
  // x: in/out. kv_k/kv_v: every layer's K/V in this forward (KV-shared layers read their source's).
  void layer_forward(const Pass& pass, int layer, Tensor& x, Cache& c, std::vector<Tensor>& kv_k,
                     std::vector<Tensor>& kv_v) const;
  void layer_backward(const Pass& pass, int layer, Cache& c, Tensor& dx);
  // The MoE block's expert half from c.x_mid into c.moe_out (saving what its backward needs); LoRA on the
  // experts' gate_up_proj/down_proj where `sites` adapts them.
  void moe_forward(const LayerSites& sites, Cache& c) const;
  // d_moe: d loss / d moe_out; adds the router's and the experts' input gradients into dx (d x_mid) and the
  // experts' LoRA gradients into the adapter.
  void moe_backward(const LayerSites& sites, Cache& c, const Tensor& d_moe, Tensor& dx) const;

  const model::Gemma4Checkpoint& ck_;
  LoraAdapter* adapter_;
  std::vector<std::vector<float>> inv_freq_;

  // Saved by forward(for_backward) for backward().
  const TokenBatch* batch_ = nullptr;
  Tensor ple_;
  ForwardOptions options_;
  int segment_size_ = 0;
  std::vector<Cache> caches_;        // per layer from first_trainable_layer() (segment_size 0)
  std::vector<Tensor> boundaries_;   // the residual at each segment's first layer (segment_size > 0)
  std::vector<Tensor> kv_k_, kv_v_;  // per layer (segment_size > 0): the K/V a KV-shared layer reads, else empty
  std::vector<Tensor> dk_, dv_;      // per layer: dK/dV from the KV-shared layers that read it
  Tensor x_final_;
};

}  // namespace brioche::train
