// Generating IFEval responses through the engine: every prompt submitted at
// once, so the scheduler batches them continuously (as many running as the
// KV cache and max_running allow, the rest queued), one model variant (the
// base or one adapter) per call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "eval/ifeval_scoring.h"

namespace brioche::eval {

struct GeneratedResponse {
  std::string text;
  std::string finish_reason;  // stop | length | error
  int completion_tokens = 0;
};

struct IfevalGeneration {
  // The chat-templated prompt tokens of one user message.
  std::function<std::vector<int32_t>(const std::string& user_message)> render_prompt;
  std::shared_ptr<const model::ServedAdapter> adapter;  // null: the base model
  int max_tokens = 1280;                                // lm-eval's ifeval generation limit
  float temperature = 0;                                // 0: greedy
  uint64_t seed = 0;                                    // per prompt: seed + key, when sampling
  // Called as responses finish (done of total); for a progress line.
  std::function<void(int done, int total, int64_t generated_tokens)> progress;
};

std::vector<GeneratedResponse> generate_ifeval_responses(engine::Engine& engine,
                                                         const std::vector<IfevalPrompt>& prompts,
                                                         const IfevalGeneration& how);

}  // namespace brioche::eval
