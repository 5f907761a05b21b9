// Gemma 4 GGUF files (llama.cpp's "gemma4" architecture, as its
// convert_hf_to_gguf.py writes them) -> Gemma4Checkpoint, dense or MoE.
#pragma once

#include <string>

#include "model/gemma4_weights.h"

namespace brioche::model {

// Whether `path` is a GGUF file whose general.architecture is gemma4
// (anything unreadable is not: the generic loader reports it).
bool is_gemma4_gguf(const std::string& path);

// Reads the metadata (as the config.json keys it stands for) and the
// tensors; errors name the file and the key or tensor.
Gemma4Checkpoint load_gemma4_gguf_checkpoint(const std::string& path);

}  // namespace brioche::model
