// LoRA adapters on disk in the PEFT layout, so peft/transformers load ours
// and we load theirs:
//   DIR/adapter_config.json        {"peft_type": "LORA", "r", "lora_alpha", "use_rslora",
//                                   "target_modules", "layers_to_transform", ...}
//   DIR/adapter_model.safetensors  base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight  [r, in]
//                                  base_model.model.model.layers.N.mlp.down_proj.lora_B.weight    [out, r]
//
// GGUF "llama" checkpoints store Q/K rows permuted for interleaved RoPE
// (llama.cpp's converter); PEFT adapters live in Hugging Face row order, so
// lora_B of q_proj/k_proj is un-permuted when written and permuted when
// loaded onto such a checkpoint.
#pragma once

#include <memory>
#include <string>

#include "model/gemma4_weights.h"
#include "model/qwen35_weights.h"
#include "model/model.h"
#include "model/served_adapter.h"
#include "model/weights.h"
#include "train/lora.h"

namespace brioche::train {

// Whether q/k rows of this checkpoint (or loaded model) are in llama.cpp's interleaved order.
bool has_permuted_qk(const model::Checkpoint& checkpoint);
bool has_permuted_qk(const model::Model& model);

struct AdapterWriteInfo {
  // base_model_name_or_path: the Hugging Face id when known (so that peft's
  // AutoPeftModelForCausalLM resolves the base), else the local path.
  std::string base_model_id;
  std::string base_model_path;  // the local file or folder trained on (brioche_base_model_path)
  // The base is a Gemma4ForConditionalGeneration checkpoint: peft finds its decoder layers under
  // model.language_model, so the tensors are named base_model.model.model.language_model.layers.N...
  // and target_modules is a regex over the text model's projections (not the towers').
  bool language_model = false;
};

// The base's Hugging Face repository id ("org/name") when the model names
// it: GGUF general.source.huggingface.repository or a huggingface.co URL in
// general.base_model.0.repo_url / general.source.url / general.url; a
// safetensors folder's config.json `_name_or_path`. Empty when none does.
std::string huggingface_repo_id(const model::Checkpoint& checkpoint);
// The same for a safetensors folder (its config.json `_name_or_path`).
std::string huggingface_repo_id(const std::string& directory);
void save_adapter(const std::string& dir, LoraAdapter& adapter, const model::Checkpoint& checkpoint,
                  const AdapterWriteInfo& info = {});
// The same for a model of `config` (permuted_qk: its q/k rows in llama.cpp's order).
void save_adapter(const std::string& dir, LoraAdapter& adapter, const model::ModelConfig& config, bool permuted_qk,
                  const AdapterWriteInfo& info = {});

// The name peft gives factor `ab` ("lora_A" or "lora_B") of (layer, m) of `adapter` on a model of `config`:
// base_model.model.model[.language_model].layers.N.<path>.<ab>.weight, the path by the model (Qwen 3.5 MoE's
// gate/up/down are mlp.shared_expert's; the experts' parameters are peft's nested ParamWrappers on
// experts / mlp.experts: gate_up_proj under .base_layer when down_proj is adapted too).
std::string peft_tensor_name(const model::ModelConfig& config, const LoraAdapter& adapter, int layer, Module m,
                             const char* ab, bool language_model = false);

// Reads a PEFT LoRA adapter (ours or peft's) for `checkpoint`, checking
// every shape against the model. Errors name the file and the tensor.
std::unique_ptr<LoraAdapter> load_adapter(const std::string& dir, const model::Checkpoint& checkpoint);
// The same for a model of `config`; a rank above max_rank is refused. A
// path that is a file is read as llama.cpp's GGUF LoRA (load_gguf_adapter).
// shapes: the model's per-layer projection shapes where its layers differ
// (Gemma 4); a tensor for a projection the layer lacks is refused.
std::unique_ptr<LoraAdapter> load_adapter(const std::string& dir, const model::ModelConfig& config, bool permuted_qk,
                                          int max_rank = 1 << 16, const LoraShapes& shapes = {});

// llama.cpp's GGUF LoRA file (train/adapter_gguf.cpp has the layout);
// shapes as load_adapter's (Gemma 4's per-layer projections).
bool is_gguf_adapter_file(const std::string& path);
std::unique_ptr<LoraAdapter> load_gguf_adapter(const std::string& path, const model::ModelConfig& config,
                                               bool base_permuted_qk, int max_rank = 1 << 16,
                                               const LoraShapes& shapes = {});

// The serving hook: the adapter unmerged, its factors on `device` as
// ops::lora_rows_add takes them (A, and s·Bᵀ, in f16).
std::shared_ptr<model::ServedAdapter> serving_adapter(const LoraAdapter& adapter, Device device);

// The inference hook: replaces each adapted weight by W + s·B·A as an f32
// tensor (dequantizing a quantized base), so the unchanged forward runs the
// adapted model. Returns the number of merged projections.
int merge_adapter(model::Checkpoint& checkpoint, const LoraAdapter& adapter);
// The same for a Gemma 4 checkpoint (load the adapter with gemma4_lora_shapes).
int merge_adapter(model::Gemma4Checkpoint& checkpoint, const LoraAdapter& adapter);
// The same for a Qwen 3.5 checkpoint (load the adapter with qwen35_lora_shapes).
int merge_adapter(model::Qwen35Checkpoint& checkpoint, const LoraAdapter& adapter);

}  // namespace brioche::train
