// `brioche bench --speculative ...`: generation through the engine with and
// without speculative decoding, alternating in one run, on real prompts.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/common.h"
#include "cli/speculative_flags.h"
#include "model/model.h"

namespace brioche::cli {

struct SpeculativeBench {
  const ModelFlags* model_flags = nullptr;
  const SpeculativeFlags* speculative = nullptr;
  std::vector<std::string> prompt_files;  // chat prompts (one file each); empty: a built-in editing prompt
  std::vector<int> batch_sizes{1};
  int max_tokens = 128;
  int repetitions = 3;
  engine::SamplingParams sampling;
};

// Prints one table row per prompt and batch size: tokens/s without and with
// speculation, the speed-up, the acceptance rate and mean accepted drafts
// per verify step; for greedy sampling also whether the outputs were equal.
void run_speculative_bench(std::shared_ptr<model::Model> model, const SpeculativeBench& bench);

}  // namespace brioche::cli
