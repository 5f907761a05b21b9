// A checkpoint written as a Hugging Face model directory: config.json and
// model.safetensors with transformers' tensor names, every matrix in one
// float type (quantized GGUF blocks dequantized), the Q/K rows of llama GGUF
// files put back in Hugging Face's order (llama.cpp's converter interleaves
// them for its RoPE), so `AutoModelForCausalLM.from_pretrained(dir)` loads it.
//
// Architectures: llama, mistral, qwen2, qwen3 (the shared Llama blocks),
// with plain or linear/llama3-scaled RoPE. Tokenizer files are the caller's
// (tokenizer/hf_tokenizer_files.h, or copied from the original folder).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "model/weights.h"

namespace brioche::model {

struct HfExportOptions {
  std::string directory;                     // created; must not exist
  DType dtype = DType::BF16;                 // F32, F16 or BF16
  int bos_token_id = -1, eos_token_id = -1;  // config.json's, -1: none
};

// config.json's object for `config` (transformers' names).
nlohmann::json hf_config_json(const ModelConfig& config, DType dtype, int bos_token_id, int eos_token_id);

// Writes config.json and model.safetensors; returns the bytes of model.safetensors.
size_t write_hf_model(const Checkpoint& checkpoint, const HfExportOptions& options);

}  // namespace brioche::model
