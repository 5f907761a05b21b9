// The engine on Gemma 4 (tests/fixtures/gemma4/e2b: sliding window 6, two
// KV-shared layers): the sliding layers keep only their window of K/V in
// the window pool, KV-shared layers keep none, and every output equals an
// engine that keeps every block (docs/server.md "Sliding-window memory").
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "model/kv_cache.h"
#include "model/model.h"

using namespace brioche;
using namespace brioche::engine;

namespace {

std::string fixture() { return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/gemma4/e2b"; }

constexpr int32_t kBlock = 4;  // small blocks: the window (6) spans 2 to 3 of them

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::Error;
  int32_t cached_prompt_tokens = -1;
};

Outcome collect(RequestHandle& handle) {
  Outcome out;
  while (std::optional<GenerationEvent> e = handle.next()) {
    EXPECT_NE(e->finish, FinishReason::Error) << e->error;
    out.tokens.insert(out.tokens.end(), e->tokens.begin(), e->tokens.end());
    if (e->finish) out.finish = *e->finish;
    if (e->done) out.cached_prompt_tokens = e->usage.cached_prompt_tokens;
  }
  return out;
}

std::vector<int32_t> prompt(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = int32_t(3 + rng() % 300);
  return ids;
}

GenerationRequest request(std::vector<int32_t> ids, int32_t max_tokens, bool seeded) {
  GenerationRequest r;
  r.prompt_tokens = std::move(ids);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  if (seeded) {
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = 77;
  } else {
    r.sampling.temperature = 0.0f;
  }
  return r;
}

// window_blocks 0: the sliding layers keep every block (the reference).
EngineOptions options(int32_t n_blocks, int32_t window_blocks, int32_t max_running = 8, int32_t batch_tokens = 64) {
  return {.model_path = fixture(),
          .kv = {.block_size = kBlock,
                 .n_blocks = n_blocks,
                 .max_context = 512,
                 .dtype = DType::F32,
                 .window_blocks = window_blocks},
          .scheduler = {.max_batch_tokens = batch_tokens, .max_running = max_running}};
}

TEST(Gemma4Engine, KvSharedLayersAndTheWindowPoolTakeNoMainBlocks) {
  std::unique_ptr<model::Model> m = model::Model::load(fixture(), {});
  const model::ModelConfig& c = m->config();
  ASSERT_EQ(c.n_layers, 5);
  // Layers 3 and 4 read layers 1 and 2's K/V: no cache of their own.
  model::KvCache whole(c, {.block_size = kBlock, .n_blocks = 32});
  EXPECT_FALSE(whole.keys(3).defined());
  EXPECT_FALSE(whole.keys(4).defined());
  size_t own = 0;
  for (int l = 0; l < 3; ++l) own += 2 * size_t(c.kv_shape(l).dim()) * kBlock * sizeof(float);
  EXPECT_EQ(model::KvCache::block_bytes(c, kBlock, DType::F32), own);
  EXPECT_EQ(whole.bytes(), 32 * own);
  // Sliding layers 0 and 1 in a pool of 5 blocks; the full layer 2 keeps 32.
  model::KvCache windowed(c, {.block_size = kBlock, .n_blocks = 32, .n_window_blocks = 5});
  EXPECT_TRUE(windowed.windowed(0) && windowed.windowed(1));
  EXPECT_FALSE(windowed.windowed(2));
  EXPECT_EQ(windowed.keys(0).dim(0), 5);
  EXPECT_EQ(windowed.keys(2).dim(0), 32);
  const size_t window_bytes = model::KvCache::window_block_bytes(c, kBlock, DType::F32);
  EXPECT_EQ(window_bytes, 2 * size_t(c.kv_shape(0).dim() + c.kv_shape(1).dim()) * kBlock * sizeof(float));
  EXPECT_EQ(windowed.bytes(), 32 * (own - window_bytes) + 5 * window_bytes);
}

// 300 tokens after a 41-token prompt: 341 positions, 86 blocks of 4; the
// sliding layers run them in a pool of 4 blocks (a window of 6 spans at
// most 3, plus the next row's).
TEST(Gemma4Engine, GeneratingFarPastTheWindowInFourWindowBlocksGivesTheTokensOfKeepingEveryBlock) {
  auto keep_all = Engine::load(options(128, 0));
  auto windowed = Engine::load(options(128, 4, 1));
  EXPECT_EQ(keep_all->stats().kv_window_blocks_total, 0);
  EXPECT_EQ(windowed->stats().kv_window_blocks_total, 4);
  EXPECT_EQ(windowed->stats().kv_blocks_total, 128);
  for (bool seeded : {false, true}) {
    Outcome want = collect(*keep_all->submit(request(prompt(1, 41), 300, seeded)));
    Outcome got = collect(*windowed->submit(request(prompt(1, 41), 300, seeded)));
    ASSERT_EQ(want.tokens.size(), 300u);
    EXPECT_EQ(got.tokens, want.tokens) << (seeded ? "seeded" : "greedy");
    EXPECT_EQ(got.finish, FinishReason::Length);
  }
}

// A window pool smaller than one sequence's window (6 positions in blocks
// of 4: 4 blocks) could never run a long sequence: refused at load, with
// the least it needs.
TEST(Gemma4Engine, AWindowPoolTooSmallForOneWindowIsRefused) {
  try {
    Engine::load(options(128, 3));
    FAIL() << "a window pool of 3 blocks loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("window pool of 3 blocks cannot hold one sequence's sliding window"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("at least 4 blocks"), std::string::npos) << e.what();
  }
}

// Four requests at once in 40 main blocks (160 positions) for 4 × 130:
// sequences are preempted and recompute; each gets its solo tokens.
TEST(Gemma4Engine, PreemptionWithTheWindowPoolGivesEachRequestItsSoloTokens) {
  auto keep_all = Engine::load(options(256, 0));
  auto windowed = Engine::load(options(40, -1, 4, 16));
  // Sized for 4 sequences' windows (3 blocks and the next row's) plus 16 rows: 20.
  EXPECT_EQ(windowed->stats().kv_window_blocks_total, 20);
  std::vector<GenerationRequest> batch;
  for (uint32_t i = 0; i < 4; ++i) batch.push_back(request(prompt(10 + i, 50 + 5 * i), 70, i % 2 == 1));
  std::vector<Outcome> solo;
  for (const GenerationRequest& r : batch) solo.push_back(collect(*keep_all->submit(GenerationRequest(r))));
  std::vector<std::shared_ptr<RequestHandle>> handles = windowed->submit_all(std::move(batch));
  for (size_t i = 0; i < handles.size(); ++i) EXPECT_EQ(collect(*handles[i]).tokens, solo[i].tokens) << i;
  EngineStats s = windowed->stats();
  EXPECT_GT(s.preemptions, 0u);
}

// A prompt that extends an earlier one reuses its blocks where the sliding
// layers' window before the reuse point is still cached (pool of 32: it
// is), and only as far as it is (pool of 4: the decode evicted it); the
// tokens are those of an engine that keeps every block either way.
TEST(Gemma4Engine, PrefixReuseTakesOnlyWhatTheWindowPoolStillHolds) {
  auto keep_all = Engine::load(options(256, 0));
  const std::vector<int32_t> first = prompt(5, 60);
  std::vector<int32_t> second = first;
  for (int32_t id : prompt(6, 20)) second.push_back(id);
  const Outcome want = collect(*keep_all->submit(request(second, 30, true)));
  for (int32_t pool : {32, 4}) {
    auto windowed = Engine::load(options(256, pool, 1));
    collect(*windowed->submit(request(first, 10, false)));
    const Outcome got = collect(*windowed->submit(request(second, 30, true)));
    EXPECT_EQ(got.tokens, want.tokens) << "pool " << pool;
    if (pool == 32) {
      EXPECT_EQ(got.cached_prompt_tokens, 60);  // the 15 blocks of `first`
    } else {
      EXPECT_LT(got.cached_prompt_tokens, 60);
    }
    EXPECT_GT(windowed->stats().prefix_hit_blocks, 0u);
  }
}

// Forks share the prompt's window blocks through the prefix cache; drafts
// (prompt lookup on a repetitive prompt) write K/V past n_computed and
// give back the rejected positions' blocks in both tables.
TEST(Gemma4Engine, ForksAndSpeculationWithTheWindowPoolGiveTheTokensOfKeepingEveryBlock) {
  auto keep_all = Engine::load(options(256, 0));
  auto windowed = Engine::load(options(256, 12, 4));
  EngineOptions speculating = options(256, 12, 4);
  speculating.scheduler.speculative_tokens = 4;
  auto drafting = Engine::load(speculating);  // greedy only: seeded drafts draw differently
  std::vector<int32_t> repetitive;
  for (int i = 0; i < 6; ++i)
    for (int32_t id : prompt(9, 7)) repetitive.push_back(id);
  GenerationRequest forks = request(prompt(8, 30), 40, true);
  forks.n = 3;
  std::vector<std::vector<int32_t>> want(3), got(3);
  for (auto [engine, out] : {std::pair{keep_all.get(), &want}, std::pair{windowed.get(), &got}}) {
    std::shared_ptr<RequestHandle> h = engine->submit(GenerationRequest(forks));
    while (std::optional<GenerationEvent> e = h->next()) {
      EXPECT_NE(e->finish, FinishReason::Error) << e->error;
      (*out)[size_t(e->choice)].insert((*out)[size_t(e->choice)].end(), e->tokens.begin(), e->tokens.end());
    }
  }
  EXPECT_EQ(got, want);
  const Outcome plain = collect(*keep_all->submit(request(repetitive, 60, false)));
  const Outcome drafted = collect(*drafting->submit(request(repetitive, 60, false)));
  EXPECT_EQ(drafted.tokens, plain.tokens);
  const EngineStats spec = drafting->stats();
  EXPECT_GT(spec.spec_accepted_tokens, 0u);
  EXPECT_LT(spec.spec_accepted_tokens, spec.spec_draft_tokens);  // rejected ones gave their blocks back
}

}  // namespace
