// What a Llama-family checkpoint looks like: sizes, attention layout, RoPE.
//
// Filled from GGUF metadata (`<arch>.*` keys) or a Hugging Face config.json;
// one struct serves Llama 2/3.x, Mistral, Qwen2/2.5, Qwen3 and SmolLM2, whose
// differences are the flags below (qkv_bias, qk_norm, RoPE style/scaling,
// tied embeddings).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/rope.h"

namespace brioche::model {

struct RopeConfig {
  float theta = 10000.0f;                       // base of the inverse frequencies
  ops::RopeStyle style = ops::RopeStyle::NeoX;  // which dims are paired
  ops::RopeScaling scaling;                     // none / linear / llama3
  std::vector<float> freq_factors;              // [head_dim/2] GGUF rope_freqs.weight, or empty
};

// One layer's slice of the paged KV cache. Architectures whose layers differ
// (Gemma 4: sliding and full layers of different head sizes; layers that read
// an earlier layer's K/V; Qwen 3.5: linear-attention layers with no K/V at
// all) list one per layer in ModelConfig::kv_layers.
struct KvLayerShape {
  int n_kv_heads = 0;  // 0: the layer keeps no K/V in the cache
  int head_dim = 0;
  // A sliding-window layer's window (a row at p reads keys p - window + 1 ..
  // p); 0: it reads every earlier key. Its K/V may then live in the cache's
  // window pool, whose blocks the engine frees once no row can read them
  // (KvCacheOptions::n_window_blocks, docs/server.md "Sliding-window memory").
  int window = 0;
  int64_t dim() const { return int64_t(n_kv_heads) * head_dim; }
};

// One layer's per-sequence recurrent state (Qwen 3.5's Gated DeltaNet
// layers): the last conv_kernel - 1 inputs of a causal depthwise conv over
// conv_channels, and an n_heads x key_dim x value_dim delta-rule state. Kept
// per sequence in a state slot of the KvCache (KvCacheOptions::n_state_slots),
// not in paged blocks: its size does not grow with the sequence.
struct RecurrentStateShape {
  int conv_channels = 0;  // 0: the layer keeps no recurrent state
  int conv_kernel = 0;
  int n_heads = 0;
  int key_dim = 0;
  int value_dim = 0;
  int64_t conv_floats() const { return conv_channels == 0 ? 0 : int64_t(conv_kernel - 1) * conv_channels; }
  int64_t recurrent_floats() const { return int64_t(n_heads) * key_dim * value_dim; }
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
  int max_context = 0;              // trained context length (metadata), 0 if unknown
  int sliding_window = 0;           // Mistral-style local attention window; 0 = full causal
  bool tied_embeddings = false;     // lm_head shares token_embd
  bool qkv_bias = false;            // Qwen2: biases on q/k/v projections
  bool qk_norm = false;             // Qwen3: RMSNorm over head_dim on q and k before RoPE
  DType weight_dtype = DType::F32;  // dominant weight storage type (informational)

  // Per-layer cache shapes; empty: every layer keeps n_kv_heads x head_dim.
  std::vector<KvLayerShape> kv_layers;
  // Per-layer recurrent state of hybrid models; empty: no layer keeps any
  // (the engine then hands out no state slots).
  std::vector<RecurrentStateShape> state_layers;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  bool has_sequence_state() const { return !state_layers.empty(); }
  KvLayerShape kv_shape(int layer) const {
    return kv_layers.empty() ? KvLayerShape{n_kv_heads, head_dim} : kv_layers[size_t(layer)];
  }
};

// ---- Validation -------------------------------------------------------------
//
// A model file is input like any request: a head count of 0 was a SIGFPE in
// `hidden / heads`, a layer count of 2^31 a loop of lookups of absent tensors,
// a negative context a huge allocation. Every loader narrows each count it
// reads with config_count() and hands the finished config to
// validate_model_config() before any tensor is looked up, so the model code
// below may divide by and allocate from these fields freely.

// Upper bounds, each far above any real model (largest known in brackets),
// low enough that products of them stay far inside int64.
inline constexpr int kMaxLayers = 4096;               // [126: Llama-3.1-405B]
inline constexpr int kMaxHiddenSize = 1 << 18;        // [16384: Llama-3.1-405B]
inline constexpr int kMaxIntermediateSize = 1 << 20;  // [53248: Llama-3.1-405B]
inline constexpr int kMaxHeads = 1024;                // [128]
inline constexpr int kMaxHeadDim = 1024;              // [256: Gemma]
inline constexpr int kMaxContext = 1 << 24;           // [10M: Llama 4 Scout]
// The attention kernels run a GQA group (n_heads / n_kv_heads query heads
// per kv head) of at most 16 (backend/cpu/attention.cpp); refused at load,
// not at the first request. [16: Llama-3.1-405B, Qwen3-235B]
inline constexpr int kMaxGqaGroup = 16;

// How the file spells each field, so that an error names the key the user can
// find in it ("llama.attention.head_count", "num_attention_heads").
struct ConfigKeyNames {
  std::string vocab_size, hidden_size, intermediate_size, n_layers, n_heads, n_kv_heads, head_dim;
  std::string rms_eps, max_context, sliding_window;
  std::string rope_theta, rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_context,
      rope_freq_factors;

  static ConfigKeyNames gguf(const std::string& arch);  // "<arch>.block_count", ...
  static ConfigKeyNames hf_config();                    // config.json: "num_hidden_layers", ...
  static ConfigKeyNames fields();                       // ModelConfig's own names (in-memory checkpoints)
};

// A count as the file stored it, narrowed to int: values outside
// 0..2^31-1 are refused ("<source>: <key>: expected an integer in
// 0..2147483647, found -3") rather than wrapped.
int config_count(int64_t value, const std::string& key, const std::string& source);
// A float field as the file stored it; out-of-range doubles become ±inf
// (refused by validate_model_config), never undefined behaviour.
float config_float(double value);

// hidden / heads, for a file that leaves head_dim out: heads must be 1 or
// more and divide hidden.
int derived_head_dim(int hidden_size, int n_heads, const ConfigKeyNames& keys, const std::string& source);

// Every count in range (the bounds above), kv heads dividing heads, head_dim
// even, floats finite and positive where they divide (rope theta, scaling
// factors, frequency factors). Throws brioche::Error
// "<source>: <key>: expected ..., found ...".
void validate_model_config(const ModelConfig& config, const ConfigKeyNames& keys, const std::string& source);

}  // namespace brioche::model
