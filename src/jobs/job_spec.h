// A fine-tuning job request (OpenAI's shape plus ours) turned into the
// options `brioche train` runs with, checked as `brioche train` checks them,
// and the job's memory estimate.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model/model_config.h"

namespace brioche::jobs {

struct JobSpec {
  std::string method_type;         // supervised | dpo | orpo | simpo | ipo
  nlohmann::json method;           // as given, normalized to {"type", <type>: {"hyperparameters": {...}}}
  nlohmann::json options;          // `brioche train` keys from the hyperparameters (no model/data/output)
  nlohmann::json hyperparameters;  // OpenAI's summary: n_epochs, batch_size, learning_rate_multiplier
  bool preference = false;
  int64_t seed = 0;
};

// Reads `method` (or the legacy top-level `hyperparameters`) and `seed` of a
// POST /v1/fine_tuning/jobs body. Throws JobsError 400: invalid_method,
// unknown_hyperparameter or invalid_hyperparameter, naming the key.
JobSpec parse_job_spec(const nlohmann::json& body);

// The steps a run of `options` over `rows` training rows takes (as Trainer::run counts them).
int64_t total_steps(const nlohmann::json& options, int64_t rows);

struct ModelShape {
  model::ModelConfig config;
  int64_t weights_bytes = 0;  // the model file's size
};

// An upper bound of the trainer's memory (docs/jobs-api.md, "Memory estimate").
int64_t estimate_memory_bytes(const nlohmann::json& options, const ModelShape& model);

}  // namespace brioche::jobs
