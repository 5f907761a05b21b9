// The engine on the default model (SmolLM2-135M Q4_1, CPU): batching and
// preemption must not change a single token. (Prefix reuse is covered on the
// toy model and end to end through usage.prompt_tokens_details.cached_tokens.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "engine/engine.h"

namespace brioche::engine {
namespace {

std::string default_model() {
  if (const char* env = std::getenv("BRIOCHE_MODEL")) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::unique_ptr<Engine> load_or_skip(EngineOptions options) {
  options.model_path = default_model();
  if (!std::filesystem::exists(options.model_path)) return nullptr;
  return Engine::load(options);
}

std::vector<int32_t> run_tokens(RequestHandle& handle) {
  std::vector<int32_t> tokens;
  while (std::optional<GenerationEvent> e = handle.next()) {
    EXPECT_NE(e->finish, FinishReason::Error) << e->error;
    tokens.insert(tokens.end(), e->tokens.begin(), e->tokens.end());
  }
  return tokens;
}

const char* kPrompts[] = {
    "The capital of France is",     "Once upon a time, in a small village,", "def fibonacci(n):",
    "The three primary colors are", "Water boils at a temperature of",       "My favourite fruit is the",
};

// Runs the four prompts one at a time, then all submitted together (batched,
// and preempted when the cache is small): each must give the same tokens.
template <typename MakeRequest>
void expect_together_equals_alone(Engine& engine, const MakeRequest& request) {
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 4; ++i) alone.push_back(run_tokens(*engine.submit(request(i))));
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 4; ++i) handles.push_back(engine.submit(request(i)));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(run_tokens(*handles[size_t(i)]), alone[size_t(i)]) << kPrompts[i];
}

TEST(EngineModel, SeededRequestsGiveTheSameTokensAloneAndBatched) {
  auto engine = load_or_skip({.kv = {.max_context = 512}});
  if (!engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  auto request = [&](int i) {
    GenerationRequest r;
    r.prompt_tokens = engine->tokenize(kPrompts[i], {.add_bos = true});
    r.sampling.temperature = 0.8f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = uint64_t(100 + i);
    r.max_tokens = 10;
    r.ignore_eos = true;
    return r;
  };
  expect_together_equals_alone(*engine, request);
}

TEST(EngineModel, PreemptionKeepsGreedyTokens) {
  // 6 blocks of 16 positions; four sequences of ~28 positions need 8: the
  // newest are preempted and recomputed.
  auto engine = load_or_skip({.kv = {.block_size = 16, .n_blocks = 6, .max_context = 80}});
  if (!engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  auto request = [&](int i) {
    GenerationRequest r;
    r.prompt_tokens = engine->tokenize(kPrompts[i], {.add_bos = true});
    r.sampling.temperature = 0.0f;
    r.max_tokens = 20;
    r.ignore_eos = true;
    return r;
  };
  expect_together_equals_alone(*engine, request);
  EngineStats s = engine->stats();
  for (int i = 0; i < 200 && s.requests_finished < 8; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    s = engine->stats();
  }
  EXPECT_GT(s.preemptions, 0u);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

TEST(EngineModel, APartlySharedKvBlockGivesTheSameGreedyTokens) {
  // The second run of a prompt shorter than a block takes all but its last
  // token's K/V by copy from the first run's block: same tokens.
  auto engine = load_or_skip({.kv = {.max_context = 256}});
  if (!engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  GenerationRequest r;
  r.prompt_tokens = engine->tokenize(kPrompts[1], {.add_bos = true});
  ASSERT_LT(r.prompt_tokens.size(), 16u);
  r.sampling.temperature = 0.0f;
  r.max_tokens = 12;
  r.ignore_eos = true;
  std::vector<int32_t> first = run_tokens(*engine->submit(r));
  std::shared_ptr<RequestHandle> again = engine->submit(r);
  std::vector<int32_t> second;
  int32_t cached = -1;
  while (std::optional<GenerationEvent> e = again->next()) {
    second.insert(second.end(), e->tokens.begin(), e->tokens.end());
    if (e->done) cached = e->usage.cached_prompt_tokens;
  }
  EXPECT_EQ(second, first);
  EXPECT_EQ(cached, int32_t(r.prompt_tokens.size()) - 1);
}

}  // namespace
}  // namespace brioche::engine
