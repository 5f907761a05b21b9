// Qwen 3.5's settings -> ModelConfig + Qwen35Config, from config.json's keys
// (a safetensors directory's config.json, or the keys a GGUF file's metadata
// maps to: model/load_qwen35_gguf.cpp). Every count is range-checked and the
// finished config validated; errors name `cfg.source` and the key.
#pragma once

#include "model/config_fields.h"
#include "model/model_config.h"
#include "model/qwen35_weights.h"

namespace brioche::model {

void read_qwen35_config(const ConfigFields& cfg, bool moe, ModelConfig& c, Qwen35Config& q);

}  // namespace brioche::model
