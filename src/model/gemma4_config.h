// What a Gemma 4 text model looks like, read from a Hugging Face config.json
// (transformers' Gemma4TextConfig; for Gemma4ForConditionalGeneration its
// "text_config"). Gemma 4's layers differ from one another, so beside the
// shared ModelConfig (sizes the engine and the KV cache read; its kv_layers
// give each layer's cache shape) there is one Gemma4LayerSpec per layer.
//
// Layer shapes, as transformers 5.25 resolves them:
//   - layer_types[i] is "sliding_attention" (window `sliding_window`, RoPE
//     rope_parameters.sliding_attention, head_dim) or "full_attention"
//     (causal over everything, rope_parameters.full_attention, the full
//     layers' head dim and kv heads);
//   - the full layers' shape comes from "per_layer_config" {"<layer>":
//     {"head_dim", "num_key_value_heads"}} (what transformers 5.25 writes)
//     or, in the hub's configs, "global_head_dim" (default 512) and, with
//     attention_k_eq_v, "num_global_key_value_heads";
//   - the last num_kv_shared_layers layers compute no K/V: each attends over
//     the cache of the last earlier layer of its own type (kv_source);
//   - with attention_k_eq_v a full layer has no v_proj: V is k_proj's output
//     (normed without scale, not rotated);
//   - with use_double_wide_mlp the KV-shared layers' MLP is twice as wide.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/model_config.h"

namespace brioche::model {

// RoPE of one layer type: inverse frequency i of a head_dim-wide head is
// theta^(-2i/head_dim) / factor for i < rotated_pairs, 0 above (those pairs
// pass unrotated: "proportional" RoPE with partial_rotary_factor).
struct Gemma4Rope {
  float theta = 10000.0f;
  float factor = 1.0f;
  float partial_rotary_factor = 1.0f;  // proportional only; default RoPE rotates every pair
  bool proportional = false;
};

struct Gemma4LayerSpec {
  bool sliding = false;  // "sliding_attention"; else "full_attention"
  int head_dim = 0;
  int n_kv_heads = 0;
  int kv_source = 0;          // the layer whose cached K/V this one reads (itself unless KV-shared)
  bool v_from_k = false;      // attention_k_eq_v on a full layer: no v_proj
  int intermediate_size = 0;  // its MLP width
};

struct Gemma4Config {
  ModelConfig base;  // architecture "gemma4"; head_dim/n_kv_heads are the sliding layers'; kv_layers set
  std::vector<Gemma4LayerSpec> layers;
  Gemma4Rope rope_sliding, rope_full;
  int ple_dim = 0;                   // hidden_size_per_layer_input; 0: no per-layer inputs
  int ple_vocab = 0;                 // vocab_size_per_layer_input
  float final_logit_softcap = 0.0f;  // 0: none
  bool attention_bias = false;       // q/k/v/o projections with biases (attention_bias)
  bool moe = false;                  // enable_moe_block
  int n_experts = 0, top_k_experts = 0, moe_intermediate_size = 0;
  // Where the text model's tensors live: "model." (Gemma4ForCausalLM) or
  // "model.language_model." (Gemma4ForConditionalGeneration).
  std::string tensor_prefix = "model.";
  bool multimodal = false;  // a Gemma4ForConditionalGeneration checkpoint (its towers are not loaded)

  bool kv_shared(int layer) const { return layers[size_t(layer)].kv_source != layer; }
  // [head_dim / 2] inverse frequencies of a layer (zeros for unrotated pairs).
  std::vector<float> inv_freq(int layer) const;
};

// True when `config` (a parsed config.json) names a Gemma 4 model
// ("model_type" gemma4 / gemma4_text, or a Gemma4* class in "architectures").
bool is_gemma4_config(const nlohmann::json& config);

// Reads and validates; `source` ("<dir>/config.json") prefixes every error,
// which names the key: "<dir>/config.json: text_config.layer_types[2]:
// expected \"sliding_attention\" or \"full_attention\", found \"chunked\"".
Gemma4Config read_gemma4_config(const nlohmann::json& config, const std::string& source);

}  // namespace brioche::model
