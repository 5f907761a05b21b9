// The tensors of a Gemma 4 text model (transformers' names in the comments,
// under "model." or, in a Gemma4ForConditionalGeneration checkpoint,
// "model.language_model."). Matrices stay in their stored dtype (zero-copy
// safetensors views, or MLX affine blocks); norms and scales are f32 copies.
// Optional tensors are undefined when the config does not use them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/gemma4_config.h"

namespace brioche::formats {
class GgufFile;
}

namespace brioche::model {

struct Gemma4LayerWeights {
  Tensor attn_norm;             // f32 [hidden]     input_layernorm
  Tensor wq, wk, wv, wo;        // [H·hd, hidden], [kvh·hd, hidden] x2, [hidden, H·hd]; wk/wv undefined
                                // when KV-shared, wv undefined with attention_k_eq_v (full layers)
  Tensor bq, bk, bv, bo;        // f32 biases of wq..wo with attention_bias (else undefined), as their weights
  Tensor q_norm, k_norm;        // f32 [hd]         self_attn.{q,k}_norm (k_norm undefined when KV-shared)
  Tensor v_norm;                // f32 [hd] of ones: v_norm has no scale
  Tensor post_attn_norm;        // f32 [hidden]     post_attention_layernorm
  Tensor pre_ffn_norm;          // f32 [hidden]     pre_feedforward_layernorm
  Tensor w_gate, w_up, w_down;  // [inter, hidden] x2, [hidden, inter]   mlp.*
  Tensor post_ffn_norm;         // f32 [hidden]     post_feedforward_layernorm
  float layer_scalar = 1.0f;    // layer_scalar: the residual stream is multiplied by it after the layer

  // Per-layer inputs (hidden_size_per_layer_input = P)
  Tensor ple_gate;       // [P, hidden]      per_layer_input_gate
  Tensor ple_proj;       // [hidden, P]      per_layer_projection
  Tensor ple_post_norm;  // f32 [hidden]     post_per_layer_input_norm

  // MoE block (E experts of width I)
  Tensor router_proj;  // [E, hidden]   router.proj
  Tensor router_norm;  // f32 [hidden]  router.scale · hidden^−½ (the router's norm has no scale of its own)
  std::vector<float> expert_scale;  // [E]     router.per_expert_scale
  Tensor experts_gate_up;           // [E, 2I, hidden]  experts.gate_up_proj (gate rows, then up rows)
  Tensor experts_down;              // [E, hidden, I]   experts.down_proj
  Tensor post_ffn_norm_1, pre_ffn_norm_2, post_ffn_norm_2;  // f32 [hidden]
};

// Every tensor of a layer (each may be undefined), for what walks them all:
// moving the weights to a device, counting their bytes.
inline constexpr Tensor Gemma4LayerWeights::*kGemma4LayerTensors[] = {&Gemma4LayerWeights::attn_norm,
                                                                      &Gemma4LayerWeights::wq,
                                                                      &Gemma4LayerWeights::wk,
                                                                      &Gemma4LayerWeights::wv,
                                                                      &Gemma4LayerWeights::wo,
                                                                      &Gemma4LayerWeights::bq,
                                                                      &Gemma4LayerWeights::bk,
                                                                      &Gemma4LayerWeights::bv,
                                                                      &Gemma4LayerWeights::bo,
                                                                      &Gemma4LayerWeights::q_norm,
                                                                      &Gemma4LayerWeights::k_norm,
                                                                      &Gemma4LayerWeights::v_norm,
                                                                      &Gemma4LayerWeights::post_attn_norm,
                                                                      &Gemma4LayerWeights::pre_ffn_norm,
                                                                      &Gemma4LayerWeights::w_gate,
                                                                      &Gemma4LayerWeights::w_up,
                                                                      &Gemma4LayerWeights::w_down,
                                                                      &Gemma4LayerWeights::post_ffn_norm,
                                                                      &Gemma4LayerWeights::ple_gate,
                                                                      &Gemma4LayerWeights::ple_proj,
                                                                      &Gemma4LayerWeights::ple_post_norm,
                                                                      &Gemma4LayerWeights::router_proj,
                                                                      &Gemma4LayerWeights::router_norm,
                                                                      &Gemma4LayerWeights::experts_gate_up,
                                                                      &Gemma4LayerWeights::experts_down,
                                                                      &Gemma4LayerWeights::post_ffn_norm_1,
                                                                      &Gemma4LayerWeights::pre_ffn_norm_2,
                                                                      &Gemma4LayerWeights::post_ffn_norm_2};

struct Gemma4Weights {
  Tensor token_embd;  // [vocab, hidden]  embed_tokens (scaled by √hidden when read)
  std::vector<Gemma4LayerWeights> layers;
  Tensor output_norm;     // f32 [hidden]     norm
  Tensor output;          // [vocab, hidden]  lm_head; token_embd when tied
  Tensor ple_embd;        // [ple_vocab, L·P] embed_tokens_per_layer (scaled by √P when read)
  Tensor ple_model_proj;  // [L·P, hidden]    per_layer_model_projection
  Tensor ple_proj_norm;   // f32 [P]          per_layer_projection_norm
};

struct Gemma4Checkpoint {
  Gemma4Config config;
  Gemma4Weights weights;
  std::string directory;
  std::string chat_template;
  std::shared_ptr<const void> files;              // keeps the mapped safetensors (or GGUF file) alive
  std::shared_ptr<const formats::GgufFile> gguf;  // a GGUF checkpoint's file (its tokenizer); null for a directory
};

// Reads a Hugging Face directory (config.json + safetensors). Errors are one
// line naming the file and the tensor or config key.
Gemma4Checkpoint load_gemma4_checkpoint(const std::string& dir);

// True when <dir>/config.json describes a Gemma 4 model (a directory whose
// config.json is missing or malformed is not: the generic loader reports it).
bool is_gemma4_directory(const std::string& dir);

}  // namespace brioche::model
