// The tensors and settings of a Qwen 3.5 text model (transformers'
// qwen3_5 / qwen3_5_moe), whatever directory they came from.
//
// Layers are of two kinds (config.json "layer_types"): Gated DeltaNet
// linear attention, whose state per sequence has a fixed size
// (ModelConfig::state_layers), and gated full attention over the paged KV
// cache (ModelConfig::kv_layers). Each layer ends in a SwiGLU MLP, or in
// qwen3_5_moe a mixture of experts with a gated shared expert.
// Matrices stay in their stored dtype; vectors are f32 copies. The
// zero-centred RMSNorm weights (transformers multiplies by 1 + w) are
// stored here as 1 + w, so that the plain ops::rms_norm applies them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/model_config.h"

namespace brioche::formats {
class GgufFile;
}

namespace brioche::model {

// What ModelConfig does not say about a Qwen 3.5 model.
struct Qwen35Config {
  std::vector<uint8_t> linear_layers;  // [n_layers] 1: Gated DeltaNet, 0: full attention
  int linear_k_heads = 0, linear_v_heads = 0, linear_key_dim = 0, linear_value_dim = 0;
  int conv_kernel = 0;
  int rotary_dim = 0;  // the leading dims of each head that RoPE rotates (partial_rotary_factor · head_dim)
  // Mixture of experts (qwen3_5_moe); n_experts 0: a dense MLP.
  int n_experts = 0, experts_per_token = 0, expert_intermediate = 0, shared_expert_intermediate = 0;

  int key_width() const { return linear_k_heads * linear_key_dim; }      // q and k of the linear layers
  int value_width() const { return linear_v_heads * linear_value_dim; }  // v and z
  int conv_channels() const { return 2 * key_width() + value_width(); }  // q, k, v through the conv
};

struct Qwen35LinearAttention {
  Tensor in_qkv;          // [conv_channels, hidden]: q, k, v (in that order of rows)
  Tensor in_z;            // [value_width, hidden]: the output gate
  Tensor in_b, in_a;      // [v_heads, hidden]: beta and decay inputs
  Tensor conv;            // f32 [conv_channels, conv_kernel]
  Tensor a_log, dt_bias;  // f32 [v_heads]
  Tensor norm;            // f32 [value_dim]: RMSNormGated's weight (plain, not 1 + w)
  Tensor out;             // [hidden, value_width]
};

struct Qwen35FullAttention {
  Tensor wq;              // [n_heads * 2 * head_dim, hidden]: per head, head_dim query rows then head_dim gate rows
  Tensor wk, wv;          // [kv_dim, hidden]
  Tensor wo;              // [hidden, q_dim]
  Tensor q_norm, k_norm;  // f32 [head_dim], 1 + w
};

struct Qwen35Mlp {
  Tensor gate, up, down;  // [inter, hidden] x2, [hidden, inter]
};

struct Qwen35Layer {
  Tensor input_norm, post_norm;  // f32 [hidden], 1 + w
  Qwen35LinearAttention linear;  // linear layers
  Qwen35FullAttention full;      // full-attention layers
  Qwen35Mlp mlp;                 // dense models
  Tensor router;                 // MoE: [n_experts, hidden]
  std::vector<Qwen35Mlp> experts;
  Qwen35Mlp shared_expert;
  Tensor shared_expert_gate;  // [1, hidden]
};

struct Qwen35Checkpoint {
  ModelConfig config;
  Qwen35Config qwen;
  Tensor token_embd;  // [vocab, hidden]
  std::vector<Qwen35Layer> layers;
  Tensor output_norm;     // f32 [hidden], 1 + w
  Tensor output;          // [vocab, hidden]; token_embd when tied
  std::string directory;  // the safetensors directory; empty for a GGUF file
  std::string chat_template;
  std::shared_ptr<const formats::GgufFile> gguf;  // a GGUF checkpoint's file (its tokenizer); null for a directory
  // The multimodal layout (Qwen3_5ForConditionalGeneration): tensors under
  // model.language_model., so peft names an adapter's layers there too.
  bool multimodal = false;
};

// Whether the safetensors directory holds a Qwen 3.5 text model
// (model_type qwen3_5[_text] / qwen3_5_moe[_text], or such an architectures class).
bool is_qwen35_directory(const std::string& dir);

// Reads config.json and the tensors, checking every count and shape; errors
// name the file and the key or tensor.
Qwen35Checkpoint load_qwen35_checkpoint(const std::string& dir);

}  // namespace brioche::model
