// One Llama block for training: forward that saves what backward needs,
// backward that accumulates LoRA gradients (+=) and writes the input
// gradient (=). Frozen base weights stay in their stored dtype.
//
//   h1 = rms(x, attn_norm);  q,k,v = lora_linear(h1)  (+bias; Qwen3: per-head rms)
//   q,k = rope(q,k);  a = attention(q,k,v);  x_mid = x + lora_linear_o(a)
//   h2 = rms(x_mid, ffn_norm);  g,u = lora_linear(h2);  act = silu(g)·u
//   x_out = x_mid + lora_linear_down(act)
// The MLP may run in row chunks (LayerContext::mlp_chunk_rows): same values,
// LoRA gradients summed chunk by chunk.
#pragma once

#include <span>
#include <vector>

#include "core/tensor.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "ops/attention_backward.h"
#include "train/lora.h"

namespace brioche::train {

// Saved activations of one layer, [n_rows, ...] f32.
struct LayerCache {
  Tensor x_in;           // [n, hidden] residual input
  Tensor h1;             // [n, hidden] (only during the projections: the backward normalises x_in again)
  Tensor q_raw, k_raw;   // [n, q_dim], [n, kv_dim] before the Qwen3 q/k norm (qk_norm only)
  Tensor q, k, v;        // [n, q_dim], [n, kv_dim] x2, after RoPE
  Tensor attn, lse;      // [n, q_dim], [n, n_heads]
  Tensor x_mid, h2;      // [n, hidden]
  Tensor gate, up, act;  // [n, inter] (empty when the MLP ran in row chunks: the backward recomputes them)
  std::array<Tensor, kNumModules> lora_u;  // [n, r] per adapted module
  // Set before a forward: attn and lse already hold this layer's attention
  // output (kept from the first forward), so the forward skips computing it.
  // Cleared by the forward.
  bool attention_given = false;
};

// What a layer sees of the batch: positions, attention layout, dropout seed.
struct LayerContext {
  const model::ModelConfig& config;
  std::span<const int32_t> positions;  // [n_rows]
  const ops::DenseAttentionLayout& layout;
  std::span<const float> inv_freq;  // [head_dim/2]
  uint64_t dropout_seed = 0;        // per micro-step; replayed by recompute
  bool adapter_enabled = true;
  bool lora_dropout = true;  // training forwards only: evaluation sees the whole adapter
  // > 0: the MLP runs over this many rows at a time (it is per-token), and
  // its [n, inter] activations are not saved: the backward recomputes
  // gate/up one chunk at a time. The layer then never holds more than
  // [mlp_chunk_rows, inter] of them, for two more GEMMs per backward.
  int64_t mlp_chunk_rows = 0;
};

struct LayerParams {
  const model::LayerWeights& weights;
  LoraAdapter* adapter = nullptr;  // may be null (base model)
  int layer = 0;
};

// x [n, hidden]: input, overwritten with the layer output. cache is filled.
void layer_forward(const LayerContext& ctx, const LayerParams& p, Tensor& x, LayerCache& cache);

// dx [n, hidden]: on entry d loss / d x_out, on exit d loss / d x_in.
// Consumes the cache: each saved activation is released once read for the
// last time (lowers the backward's peak by the [n, inter] buffers).
void layer_backward(const LayerContext& ctx, const LayerParams& p, LayerCache& cache, Tensor& dx);

}  // namespace brioche::train
