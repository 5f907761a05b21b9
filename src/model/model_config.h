// What a Llama-family checkpoint looks like: sizes, attention layout, RoPE.
//
// Filled from GGUF metadata (`<arch>.*` keys) or a Hugging Face config.json;
// one struct serves Llama 2/3.x, Mistral, Qwen2/2.5, Qwen3 and SmolLM2, whose
// differences are the flags below (qkv_bias, qk_norm, RoPE style/scaling,
// tied embeddings).
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/rope.h"

namespace brioche::model {

struct RopeConfig {
  float theta = 10000.0f;                            // base of the inverse frequencies
  ops::RopeStyle style = ops::RopeStyle::NeoX;       // which dims are paired
  ops::RopeScaling scaling;                          // none / linear / llama3
  std::vector<float> freq_factors;                   // [head_dim/2] GGUF rope_freqs.weight, or empty
};

struct ModelConfig {
  std::string architecture;  // "llama", "mistral", "qwen2", "qwen3"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float rms_eps = 1e-5f;
  RopeConfig rope;
  int max_context = 0;        // trained context length (metadata), 0 if unknown
  int sliding_window = 0;     // Mistral-style local attention window; 0 = full causal
  bool tied_embeddings = false;  // lm_head shares token_embd
  bool qkv_bias = false;         // Qwen2: biases on q/k/v projections
  bool qk_norm = false;          // Qwen3: RMSNorm over head_dim on q and k before RoPE
  DType weight_dtype = DType::F32;  // dominant weight storage type (informational)

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

}  // namespace brioche::model
