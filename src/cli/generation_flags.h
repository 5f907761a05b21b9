// Sampling and length flags shared by `run` and `chat`.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "engine/request.h"

namespace brioche::cli {

struct GenerationFlags {
  int max_tokens = 256;
  float temperature = 0.7f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.05f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int64_t seed = -1;  // -1: random
  std::vector<std::string> stop;
  bool ignore_eos = false;

  void add_to(CLI::App& app);
  // A request for `prompt_tokens` with these settings.
  engine::GenerationRequest to_request(std::vector<int32_t> prompt_tokens) const;
};

}  // namespace brioche::cli
