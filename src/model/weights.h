// The tensors of a Llama-family model, whatever file they came from.
//
// Matrices stay in their stored dtype (quantized GGUF blocks, bf16, MLX affine
// blocks) as zero-copy views where possible; vectors (norms, biases) are f32.
// Optional tensors are undefined Tensors when the checkpoint lacks them.
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

struct LayerWeights {
  Tensor attn_norm;             // f32 [hidden]
  Tensor wq, wk, wv, wo;        // [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
  Tensor bq, bk, bv, bo;        // f32 [q_dim], [kv_dim] x2, [hidden]; optional (Qwen2: q/k/v)
  Tensor q_norm, k_norm;        // f32 [head_dim]; optional (Qwen3)
  Tensor ffn_norm;              // f32 [hidden]
  Tensor w_gate, w_up, w_down;  // [inter, hidden] x2, [hidden, inter]
};

struct ModelWeights {
  Tensor token_embd;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  Tensor output_norm;  // f32 [hidden]
  Tensor output;       // [vocab, hidden]; the token_embd view when tied
};

// A checkpoint read from disk: what Model::load needs to build a model.
struct Checkpoint {
  ModelConfig config;
  ModelWeights weights;
  std::shared_ptr<formats::GgufFile> gguf;  // GGUF only
  std::string directory;                    // safetensors only
  std::string chat_template;
  std::string source;  // the path, for messages
};

// Architectures the shared Llama blocks implement.
bool is_supported_architecture(const std::string& arch);
[[noreturn]] void fail_unsupported_architecture(const std::string& arch, const std::string& path);

Checkpoint load_gguf_checkpoint(const std::string& path);
Checkpoint load_safetensors_checkpoint(const std::string& dir);
// A safetensors directory's chat template: chat_template.jinja, else
// tokenizer_config.json's "chat_template"; "" if none.
std::string read_chat_template(const std::string& dir);

// A copy of a vector tensor as contiguous f32 (norm weights, biases).
Tensor to_f32(const Tensor& t);
// Checks a tensor's shape, naming it and the file on mismatch.
void check_shape(const Tensor& t, std::initializer_list<int64_t> shape, const std::string& name,
                 const std::string& source);
// The dtype holding most weight bytes.
DType dominant_dtype(const ModelWeights& weights);

}  // namespace brioche::model
