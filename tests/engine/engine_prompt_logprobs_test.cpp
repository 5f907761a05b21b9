// Prompt logprobs (GenerationRequest::prompt_logprobs, OpenAI completions'
// echo + logprobs) on the default model: scoring a text must give the same
// log p(t_i | t_<i) as generating it did, whatever the prefill chunking and
// whether the prompt's blocks are in the prefix cache.
// GCC 12 warns about members left to their defaults in designated initializers.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
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

struct Outcome {
  std::vector<TokenLogprob> prompt, generated;
  std::vector<int32_t> tokens;
  std::optional<FinishReason> finish;
};

Outcome run(Engine& engine, GenerationRequest request) {
  Outcome out;
  auto handle = engine.submit(std::move(request));
  while (std::optional<GenerationEvent> e = handle->next()) {
    EXPECT_NE(e->finish, FinishReason::Error) << e->error;
    out.prompt.insert(out.prompt.end(), e->prompt_logprobs.begin(), e->prompt_logprobs.end());
    out.generated.insert(out.generated.end(), e->logprobs.begin(), e->logprobs.end());
    out.tokens.insert(out.tokens.end(), e->tokens.begin(), e->tokens.end());
    if (e->finish) out.finish = e->finish;
  }
  return out;
}

// Greedy generation gives each new token's logprob; the same tokens sent back
// as a prompt with max_tokens 0 must score them the same (prefill rows vs
// decode rows: same math, f16 K/V either way, so a loose 2e-3).
void expect_scoring_matches_generation(Engine& engine) {
  const std::vector<int32_t> prompt = engine.tokenize("The capital of France is", {.add_bos = true});
  GenerationRequest gen{.prompt_tokens = prompt, .max_tokens = 12, .ignore_eos = true, .top_logprobs = 2};
  gen.sampling.temperature = 0;
  Outcome generated = run(engine, gen);
  ASSERT_EQ(generated.generated.size(), 12u);

  std::vector<int32_t> text = prompt;
  text.insert(text.end(), generated.tokens.begin(), generated.tokens.end());
  GenerationRequest score{.prompt_tokens = text, .max_tokens = 0, .top_logprobs = 2, .prompt_logprobs = true};
  for (int pass = 0; pass < 2; ++pass) {  // the second finds the prompt's blocks cached: scored anyway
    Outcome scored = run(engine, score);
    EXPECT_EQ(scored.finish, FinishReason::Length);
    EXPECT_TRUE(scored.tokens.empty());
    ASSERT_EQ(scored.prompt.size(), text.size() - 1) << "pass " << pass;
    for (size_t i = 0; i < text.size() - 1; ++i) {
      EXPECT_EQ(scored.prompt[i].token, text[i + 1]);
      ASSERT_EQ(scored.prompt[i].top.size(), 2u);
      EXPECT_GE(scored.prompt[i].top[0].logprob, scored.prompt[i].logprob - 1e-6f);
    }
    for (size_t k = 0; k < generated.generated.size(); ++k) {
      const TokenLogprob& want = generated.generated[k];
      const TokenLogprob& got = scored.prompt[prompt.size() - 1 + k];
      EXPECT_EQ(got.token, want.token) << "token " << k;
      EXPECT_NEAR(got.logprob, want.logprob, 2e-3) << "token " << k << " pass " << pass;
      EXPECT_EQ(got.top[0].token, want.top[0].token) << "token " << k;  // greedy: the best is the one generated
    }
  }

  // With generation after the prompt: the prompt's logprobs come first, then one token.
  GenerationRequest both = score;
  both.max_tokens = 1;
  Outcome scored_and_one = run(engine, both);
  EXPECT_EQ(scored_and_one.prompt.size(), text.size() - 1);
  EXPECT_EQ(scored_and_one.generated.size(), 1u);
}

TEST(EnginePromptLogprobs, ScoringATextGivesTheLogprobsOfGeneratingIt) {
  auto engine = load_or_skip({.kv = {.max_context = 256}});
  if (!engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  expect_scoring_matches_generation(*engine);
}

TEST(EnginePromptLogprobs, ChunkedPrefillScoresEveryPromptToken) {
  // 5 rows per forward: the 17-token text is prefilled in 4 chunks.
  auto engine = load_or_skip({.kv = {.max_context = 256}, .scheduler = {.max_batch_tokens = 5}});
  if (!engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  expect_scoring_matches_generation(*engine);
}

TEST(EnginePromptLogprobs, MaxTokensZeroNeedsPromptLogprobs) {
  auto engine = load_or_skip({.kv = {.max_context = 256}});
  if (!engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  GenerationRequest r{.prompt_tokens = engine->tokenize("Hi", {.add_bos = true}), .max_tokens = 0};
  auto handle = engine->submit(r);
  std::optional<GenerationEvent> e = handle->next();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->finish, FinishReason::Error);
  EXPECT_NE(e->error.find("max_tokens must be at least 1"), std::string::npos) << e->error;
}

}  // namespace
}  // namespace brioche::engine
