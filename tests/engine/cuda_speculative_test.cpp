// Speculative decoding on the GPU (scheduler.cpp: the device sampler samples
// the plain rows, the verify rows' logits come back and are judged on the
// host). On a small random model on CUDA, each request runs with and
// without speculation on one engine:
//   * prompt lookup, greedy, alone and batched: the same tokens, drafts
//     accepted and rejected, every KV block back at the end;
//   * a draft model with the target's weights (its own model and cache):
//     the same greedy tokens, nearly every draft accepted (a draft cache out
//     of step with the sequence would guess wrong);
//   * a draft model with other weights, sampled and seeded: the same tokens
//     on a second run, drafts both accepted and rejected, the draft's blocks
//     back;
//   * a grammar, with both proposers: the same greedy tokens, text in the
//     grammar.
// Greedy equality rests on the verify rows' logits (a chunk of 1 + k rows,
// run eagerly) picking the same argmax as a decode step's (a graph of one
// row): they may differ in the last bits, which flips a token only where
// two tie to rounding (docs/speculative.md); the fixtures here have none.
// Without a GPU every test reports "skipped: no CUDA device".
#include <gtest/gtest.h>

#if BRIOCHE_CUDA

#include <chrono>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "engine/cuda_tiny_engine.h"
#include "engine/draft_model_proposer.h"
#include "ops/device.h"
#include "require_cuda.h"

namespace brioche::engine {
namespace {

using namespace cuda_test;

// One model object per (seed, copy), so a draft with the target's weights
// still has its own model (and decode graphs).
std::shared_ptr<model::Model> tiny_model(uint64_t seed) { return tiny_cuda_llama(seed); }

std::shared_ptr<model::Model> target_model() {
  static std::shared_ptr<model::Model> model = tiny_model(5);
  return model;
}

const KvSizing kKv{.block_size = 16, .n_blocks = 256, .max_context = 256};

SchedulerOptions speculating() {
  SchedulerOptions options;
  options.speculative_tokens = 4;
  options.speculative_adaptive = false;  // K drafts whenever the proposer has them: every step is exercised
  return options;
}

struct Engines {
  std::unique_ptr<Engine> engine;
  DraftModelProposer* draft = nullptr;  // owned by the engine; null for prompt lookup
};

Engines prompt_lookup_engine() {
  return {std::make_unique<Engine>(make_model_runner(target_model(), kKv), std::make_unique<SemicolonCodec>(),
                                   speculating()),
          nullptr};
}

Engines draft_model_engine(std::shared_ptr<model::Model> draft) {
  auto proposer = std::make_unique<DraftModelProposer>(make_model_runner(std::move(draft), kKv), 1.0);
  DraftModelProposer* raw = proposer.get();
  return {std::make_unique<Engine>(make_model_runner(target_model(), kKv), std::make_unique<SemicolonCodec>(),
                                   speculating(), std::move(proposer)),
          raw};
}

struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::Error;
};

Output collect(RequestHandle& handle) {
  Output out;
  while (std::optional<GenerationEvent> e = handle.next()) {
    EXPECT_NE(e->finish, FinishReason::Error) << e->error;
    out.tokens.insert(out.tokens.end(), e->tokens.begin(), e->tokens.end());
    out.text += e->text;
    if (e->finish) out.finish = *e->finish;
  }
  return out;
}

// `requests` submitted together, with speculation or without.
std::vector<Output> generate(Engine& engine, std::vector<GenerationRequest> requests, bool speculative) {
  for (GenerationRequest& r : requests) r.speculative = speculative;
  std::vector<Output> out;
  for (const std::shared_ptr<RequestHandle>& h : engine.submit_all(std::move(requests))) out.push_back(collect(*h));
  return out;
}

std::vector<GenerationRequest> greedy_requests() {
  std::vector<GenerationRequest> out;
  // Repeats in the prompt give prompt lookup something to copy; a random
  // model's greedy text soon repeats itself too.
  out.push_back(request({1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3}, 64, {.temperature = 0.0f}));
  out.push_back(request({9, 8, 7}, 48, {.temperature = 0.0f}));
  out.push_back(request({40, 41, 42, 43, 40, 41, 42, 43, 40, 41}, 40, {.temperature = 0.0f}));
  // Over a block boundary with drafts, and a logit bias (applied to every verify row).
  GenerationRequest biased = request({300, 301, 302}, 56, {.temperature = 0.0f, .logit_bias = {{17, 3.0f}}});
  out.push_back(biased);
  return out;
}

void expect_same_tokens(const std::vector<Output>& with, const std::vector<Output>& without, const char* what) {
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) {
    EXPECT_EQ(with[i].tokens, without[i].tokens) << what << ", request " << i;
    EXPECT_EQ(with[i].finish, FinishReason::Length) << what << ", request " << i;
  }
}

TEST(CudaSpeculative, PromptLookupGreedyTokensEqualPlainDecoding) {
  REQUIRE_CUDA_DEVICE();
  Engines e = prompt_lookup_engine();
  // One at a time, then all four in one batch (every one speculating: at
  // most speculative_max_batch decoding).
  for (const GenerationRequest& r : greedy_requests()) {
    std::vector<Output> without = generate(*e.engine, {r}, false);
    std::vector<Output> with = generate(*e.engine, {r}, true);
    expect_same_tokens(with, without, "alone");
  }
  expect_same_tokens(generate(*e.engine, greedy_requests(), true), generate(*e.engine, greedy_requests(), false),
                     "batched");
  e.engine->shutdown();  // the last step's stats are in once the engine thread is done
  const EngineStats s = e.engine->stats();
  EXPECT_GT(s.spec_accepted_tokens, 20u) << "prompt lookup found nothing to copy: the test checks nothing";
  EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens) << "rejections (and their rollback) must happen too";
  EXPECT_EQ(s.kv_blocks_used, 0) << "blocks of rejected drafts go back";
}

TEST(CudaSpeculative, DraftModelWithTheTargetsWeightsGivesTheSameGreedyTokens) {
  REQUIRE_CUDA_DEVICE();
  Engines e = draft_model_engine(tiny_model(5));
  for (const GenerationRequest& r : greedy_requests()) {
    std::vector<Output> without = generate(*e.engine, {r}, false);
    std::vector<Output> with = generate(*e.engine, {r}, true);
    expect_same_tokens(with, without, "alone");
  }
  expect_same_tokens(generate(*e.engine, greedy_requests(), true), generate(*e.engine, greedy_requests(), false),
                     "batched");
  e.engine->shutdown();
  const EngineStats s = e.engine->stats();
  ASSERT_GT(s.spec_draft_tokens, 100u);
  // The draft is the model: a draft wrong more than rarely had K/V out of
  // step with the sequence (stale after a rollback, or missing positions).
  EXPECT_GT(double(s.spec_accepted_tokens) / double(s.spec_draft_tokens), 0.9);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(e.draft->used_blocks(), 0) << "the draft's blocks go back when sequences finish";
  EXPECT_EQ(e.draft->tracked_sequences(), 0u);
}

TEST(CudaSpeculative, SeededSampledRequestsWithAnotherDraftAreReproducible) {
  REQUIRE_CUDA_DEVICE();
  // Two engines, so that the second run's prompts do not come from the
  // first's prefix cache (a prompt's last row computed in another batch
  // shape may round differently, with or without speculation).
  Engines e = draft_model_engine(tiny_model(6)), again = draft_model_engine(tiny_model(6));
  std::vector<GenerationRequest> requests;
  requests.push_back(request({1, 2, 3, 4}, 48, {.temperature = 0.8f, .seed = 11}));
  requests.push_back(request({7, 7, 7}, 40, {.temperature = 1.0f, .top_k = 40, .top_p = 0.95f, .seed = 12}));
  requests.push_back(request({50, 60}, 44, {.temperature = 0.6f, .repetition_penalty = 1.1f, .seed = 13}));
  const std::vector<Output> first = generate(*e.engine, requests, true);
  const std::vector<Output> second = generate(*again.engine, requests, true);
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].tokens.size(), size_t(requests[i].max_tokens)) << "request " << i;
    EXPECT_EQ(second[i].tokens, first[i].tokens) << "request " << i;
  }
  e.engine->shutdown();
  const EngineStats s = e.engine->stats();
  EXPECT_GT(s.spec_accepted_tokens, 0u);
  EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(e.draft->used_blocks(), 0);
}

TEST(CudaSpeculative, GrammarGreedyTokensEqualPlainDecodingWithBothProposers) {
  REQUIRE_CUDA_DEVICE();
  // Thirteen tokens allowed at each step: drafts the grammar forbids are cut
  // before the forward, the rest judged under each row's own mask.
  GenerationRequest masked = request({17, 18}, 60, {.temperature = 0.0f});
  masked.constraint.compiled = compile(R"(root ::= ("x5;" | "x6;" | "x7;" | "x8" [0-9] ";")+)");
  GenerationRequest other = masked;
  other.prompt_tokens = {5, 6, 7, 5, 6, 7, 5};
  other.max_tokens = 50;
  const std::regex text("(x5;|x6;|x7;|x8[0-9];)+");
  for (int proposer = 0; proposer < 2; ++proposer) {
    Engines e = proposer == 0 ? prompt_lookup_engine() : draft_model_engine(tiny_model(5));
    const char* name = proposer == 0 ? "prompt lookup" : "draft model";
    for (const GenerationRequest& r : {masked, other}) {
      std::vector<Output> without = generate(*e.engine, {r}, false);
      std::vector<Output> with = generate(*e.engine, {r}, true);
      expect_same_tokens(with, without, name);
      EXPECT_TRUE(std::regex_match(with[0].text, text)) << name << ": " << with[0].text;
    }
    expect_same_tokens(generate(*e.engine, {masked, other}, true), generate(*e.engine, {masked, other}, false), name);
    e.engine->shutdown();
    const EngineStats s = e.engine->stats();
    // Only prompt lookup's kept drafts are asserted. The draft model (the
    // target's weights) proposed blind when this was written, its guesses
    // mostly cut; it now drafts under the grammar's mask, so its drafts
    // should be kept as well, not yet checked on a GPU with a bound here.
    if (proposer == 0) {
      EXPECT_GT(s.spec_accepted_tokens, 10u) << name;
    }
    EXPECT_EQ(s.kv_blocks_used, 0) << name;
  }
}

}  // namespace
}  // namespace brioche::engine

#else

TEST(CudaSpeculative, NotBuilt) { GTEST_SKIP() << "skipped: no CUDA device (built without BRIOCHE_CUDA)"; }

#endif
