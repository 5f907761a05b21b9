// Qwen 3.5 GGUF files (llama.cpp's "qwen35" and "qwen35moe" architectures,
// as its convert_hf_to_gguf.py writes them) -> Qwen35Checkpoint.
#pragma once

#include <string>

#include "model/qwen35_weights.h"

namespace brioche::model {

// Whether `path` is a GGUF file whose general.architecture is qwen35 or
// qwen35moe (anything unreadable is not: the generic loader reports it).
bool is_qwen35_gguf(const std::string& path);

// Reads the metadata and tensors, undoing the converter's changes: V heads
// back from llama.cpp's tiled order to transformers' grouped order, A_log
// from ssm_a = -exp(A_log). Errors name the file and the key or tensor.
Qwen35Checkpoint load_qwen35_gguf_checkpoint(const std::string& path);

}  // namespace brioche::model
