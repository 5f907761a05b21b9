// Scheduler behaviour on the toy model (tests/engine/toy_model.h): its tokens
// depend on K/V read back through the block tables, so any scheduling bug
// (wrong sharing, stale block, bad resume) changes the output.
#include <gtest/gtest.h>

#include <thread>

#include "engine/engine.h"
#include "engine/toy_model.h"

namespace brioche::engine {
namespace {

using testing::ToyCodec;
using testing::ToyConfig;
using testing::ToyRunner;

std::unique_ptr<Engine> make_toy_engine(ToyConfig config, SchedulerOptions options = {},
                                        std::vector<int32_t> eos = {}) {
  return std::make_unique<Engine>(std::make_unique<ToyRunner>(config), std::make_unique<ToyCodec>(eos), options);
}

std::vector<int32_t> prompt_of(int32_t length, int32_t salt) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < length; ++i) p.push_back((i * 7 + salt * 13 + 1) % 64);
  return p;
}

GenerationRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  return r;
}

// Stats are published after each step, a moment after that step's events:
// wait until `n` requests have finished in the published numbers.
EngineStats settled_stats(const Engine& engine, uint64_t n_finished) {
  for (int i = 0; i < 400; ++i) {
    EngineStats s = engine.stats();
    if (s.requests_finished >= n_finished) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return engine.stats();
}

struct Collected {
  std::vector<std::vector<int32_t>> tokens;  // per choice
  std::vector<std::string> text;
  std::vector<FinishReason> finish;
  GenerationEvent last;
};

Collected collect(RequestHandle& handle, int32_t n = 1) {
  Collected c;
  c.tokens.resize(size_t(n));
  c.text.resize(size_t(n));
  c.finish.resize(size_t(n), FinishReason::Error);
  while (std::optional<GenerationEvent> e = handle.next()) {
    auto& toks = c.tokens[size_t(e->choice)];
    toks.insert(toks.end(), e->tokens.begin(), e->tokens.end());
    c.text[size_t(e->choice)] += e->text;
    if (e->finish) c.finish[size_t(e->choice)] = *e->finish;
    c.last = *e;
  }
  return c;
}

TEST(EngineScheduler, GreedyMatchesCachelessReference) {
  auto engine = make_toy_engine({});
  std::vector<int32_t> prompt = prompt_of(11, 1);
  Collected c = collect(*engine->submit(greedy(prompt, 9)));
  EXPECT_EQ(c.tokens[0], ToyRunner::greedy_reference(prompt, 9, 64));
  EXPECT_EQ(c.finish[0], FinishReason::Length);
  EXPECT_TRUE(c.last.done);
  EXPECT_EQ(c.last.usage.prompt_tokens, 11);
  EXPECT_EQ(c.last.usage.completion_tokens, 9);
  EXPECT_EQ(c.text[0].size(), 9u);
  EXPECT_EQ(settled_stats(*engine, 1).kv_blocks_used, 0);
}

TEST(EngineScheduler, ChunkedPrefillOfALongPromptMatchesReference) {
  auto engine = make_toy_engine({.context = 512, .n_blocks = 80}, {.max_batch_tokens = 8});
  std::vector<int32_t> prompt = prompt_of(61, 2);
  Collected c = collect(*engine->submit(greedy(prompt, 5)));
  EXPECT_EQ(c.tokens[0], ToyRunner::greedy_reference(prompt, 5, 64));
  EXPECT_EQ(settled_stats(*engine, 1).steps, 8u + 4u);  // 61 rows in chunks of <= 8, then decodes
}

TEST(EngineScheduler, ConcurrentRequestsEachMatchTheirReference) {
  auto engine = make_toy_engine({});
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int32_t i = 0; i < 8; ++i) handles.push_back(engine->submit(greedy(prompt_of(5 + i * 3, i), 6 + i)));
  for (int32_t i = 0; i < 8; ++i) {
    Collected c = collect(*handles[size_t(i)]);
    EXPECT_EQ(c.tokens[0], ToyRunner::greedy_reference(prompt_of(5 + i * 3, i), 6 + i, 64)) << "request " << i;
  }
}

// submit_all hands the engine its requests in one go: its first step
// prefills all of them, and they decode together to the end, so 8 requests
// of 5 new tokens take exactly 5 steps (one prefill, four decodes). An
// invalid request among them gets its error alone.
TEST(EngineScheduler, RequestsSubmittedTogetherRunAsOneBatch) {
  auto engine = make_toy_engine({.n_blocks = 128}, {.max_batch_tokens = 256});
  std::vector<GenerationRequest> requests;
  for (int32_t i = 0; i < 8; ++i) requests.push_back(greedy(prompt_of(6 + i, i), 5));
  requests.insert(requests.begin() + 3, greedy({}, 5));  // empty prompt
  std::vector<std::shared_ptr<RequestHandle>> handles = engine->submit_all(std::move(requests));
  ASSERT_EQ(handles.size(), 9u);
  Collected bad = collect(*handles[3]);
  EXPECT_EQ(bad.finish[0], FinishReason::Error);
  EXPECT_NE(bad.last.error.find("the prompt is empty"), std::string::npos) << bad.last.error;
  for (int32_t i = 0, h = 0; i < 8; ++i, ++h) {
    if (h == 3) ++h;
    Collected c = collect(*handles[size_t(h)]);
    EXPECT_EQ(c.tokens[0], ToyRunner::greedy_reference(prompt_of(6 + i, i), 5, 64)) << "request " << i;
  }
  EXPECT_EQ(settled_stats(*engine, 8).steps, 5u);
}

TEST(EngineScheduler, PrefixCacheServesARepeatedPrompt) {
  auto engine = make_toy_engine({});
  std::vector<int32_t> prompt = prompt_of(18, 3);  // 4 full blocks of 4 + 2
  Collected first = collect(*engine->submit(greedy(prompt, 4)));
  EXPECT_EQ(first.last.usage.cached_prompt_tokens, 0);
  uint64_t rows_before = settled_stats(*engine, 1).prompt_tokens_computed;
  Collected second = collect(*engine->submit(greedy(prompt, 4)));
  EXPECT_EQ(second.tokens[0], first.tokens[0]);
  // 4 full blocks, and the first of the 2 tokens in the fifth block (copied
  // from the first request's fifth block, which its generated tokens filled):
  // the last prompt token always runs, for its logits.
  EXPECT_EQ(second.last.usage.cached_prompt_tokens, 17);
  EngineStats after_second = settled_stats(*engine, 2);
  EXPECT_EQ(after_second.prompt_tokens_computed - rows_before, 1u);
  EXPECT_GE(after_second.prefix_hit_blocks, 4u);
  // A prompt differing at token 9 reuses the first 2 blocks and token 8.
  std::vector<int32_t> forked = prompt;
  forked[9] = (forked[9] + 1) % 64;
  Collected third = collect(*engine->submit(greedy(forked, 4)));
  EXPECT_EQ(third.last.usage.cached_prompt_tokens, 9);
  EXPECT_EQ(third.tokens[0], ToyRunner::greedy_reference(forked, 4, 64));
}

TEST(EngineScheduler, RequestsArrivingTogetherComputeASharedPrefixOnce) {
  // Four prompts with the same 3 blocks (of 4) and their own 5-token tails,
  // submitted at once: the shared blocks are computed by one of them, the
  // others wait a step and take them from the prefix cache (whatever step
  // they arrive in), and every output equals its cacheless reference.
  auto engine = make_toy_engine({});
  std::vector<int32_t> shared = prompt_of(12, 4);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int32_t i = 0; i < 4; ++i) {
    std::vector<int32_t> p = shared;
    for (int32_t t = 0; t < 5; ++t) p.push_back((i * 11 + t * 3 + 5) % 64);
    prompts.push_back(p);
    handles.push_back(engine->submit(greedy(p, 5)));
  }
  for (int32_t i = 0; i < 4; ++i) {
    Collected c = collect(*handles[size_t(i)]);
    EXPECT_EQ(c.tokens[0], ToyRunner::greedy_reference(prompts[size_t(i)], 5, 64)) << "request " << i;
  }
  EXPECT_EQ(settled_stats(*engine, 4).prompt_tokens_computed, 12u + 4u * 5u);
}

TEST(EngineScheduler, APrefixSharedMidBlockIsCopiedNotRecomputed) {
  // A 10-token shared prefix is 2 blocks of 4 and 2 tokens of the third
  // (a system prompt that ends mid-block). After one request computed it,
  // later ones take the 2 full blocks from the prefix cache and the 2
  // leading positions of the third by copy, and compute only their tails.
  auto engine = make_toy_engine({});
  std::vector<int32_t> shared = prompt_of(10, 5);
  auto prompt = [&](int32_t i) {
    std::vector<int32_t> p = shared;
    for (int32_t t = 0; t < 5; ++t) p.push_back((i * 11 + t * 3 + 5) % 64);
    return p;
  };
  Collected first = collect(*engine->submit(greedy(prompt(0), 3)));
  EXPECT_EQ(first.tokens[0], ToyRunner::greedy_reference(prompt(0), 3, 64));
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int32_t i = 1; i <= 3; ++i) handles.push_back(engine->submit(greedy(prompt(i), 3)));
  for (int32_t i = 1; i <= 3; ++i) {
    Collected c = collect(*handles[size_t(i - 1)]);
    EXPECT_EQ(c.tokens[0], ToyRunner::greedy_reference(prompt(i), 3, 64)) << "request " << i;
    EXPECT_EQ(c.last.usage.cached_prompt_tokens, 10) << "request " << i;
  }
  EngineStats s = settled_stats(*engine, 4);
  EXPECT_EQ(s.prompt_tokens_computed, 15u + 3u * 5u);
  EXPECT_EQ(s.prefix_hit_partial_tokens, 3u * 2u);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

TEST(EngineScheduler, PartialPrefixSharingIsOffWithThePrefixCache) {
  auto engine = make_toy_engine({}, {.prefix_cache = false});
  std::vector<int32_t> prompt = prompt_of(10, 6);
  collect(*engine->submit(greedy(prompt, 6)));
  Collected again = collect(*engine->submit(greedy(prompt, 6)));
  EXPECT_EQ(again.tokens[0], ToyRunner::greedy_reference(prompt, 6, 64));
  EXPECT_EQ(again.last.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(settled_stats(*engine, 2).prefix_hit_partial_tokens, 0u);
}

TEST(EngineScheduler, PreemptionResumesWithIdenticalTokens) {
  // 12 blocks of 4 = 48 positions for 4 sequences that each grow to 40.
  auto engine =
      make_toy_engine({.context = 512, .block_size = 4, .n_blocks = 12, .step_delay = std::chrono::milliseconds(2)},
                      {.prefix_cache = false});
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int32_t i = 0; i < 4; ++i) handles.push_back(engine->submit(greedy(prompt_of(10, 10 + i), 30)));
  for (int32_t i = 0; i < 4; ++i) {
    Collected c = collect(*handles[size_t(i)]);
    EXPECT_EQ(c.finish[0], FinishReason::Length);
    EXPECT_EQ(c.tokens[0], ToyRunner::greedy_reference(prompt_of(10, 10 + i), 30, 64)) << "request " << i;
  }
  EngineStats s = settled_stats(*engine, 4);
  EXPECT_GT(s.preemptions, 0u);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

TEST(EngineScheduler, CancellationFreesBlocksAtTheNextStep) {
  auto engine = make_toy_engine({.context = 100000, .n_blocks = 30000});
  auto handle = engine->submit(greedy(prompt_of(9, 4), 50000));
  std::optional<GenerationEvent> first = handle->next();
  ASSERT_TRUE(first.has_value());
  engine->cancel(handle->id());
  Collected rest = collect(*handle);
  EXPECT_EQ(rest.finish[0], FinishReason::Cancelled);
  EXPECT_TRUE(rest.last.done);
  EXPECT_LT(rest.last.usage.completion_tokens, 50000);
  EngineStats s = settled_stats(*engine, 1);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.running, 0);
}

TEST(EngineScheduler, SeededSamplingIsTheSameAloneAndBatched) {
  auto make = [](int32_t i) {
    GenerationRequest r;
    r.prompt_tokens = prompt_of(7 + i, 20 + i);
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = uint64_t(1000 + i);
    r.max_tokens = 12;
    return r;
  };
  std::vector<std::vector<int32_t>> alone;
  {
    auto engine = make_toy_engine({});
    for (int32_t i = 0; i < 6; ++i) alone.push_back(collect(*engine->submit(make(i))).tokens[0]);
  }
  auto engine = make_toy_engine({});
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int32_t i = 0; i < 6; ++i) handles.push_back(engine->submit(make(i)));
  for (int32_t i = 0; i < 6; ++i)
    EXPECT_EQ(collect(*handles[size_t(i)]).tokens[0], alone[size_t(i)]) << "request " << i;
}

TEST(EngineScheduler, ForksShareThePromptAndFollowTheirSeeds) {
  auto engine = make_toy_engine({});
  GenerationRequest r;
  r.prompt_tokens = prompt_of(13, 5);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 77;
  r.max_tokens = 8;
  r.n = 3;
  Collected forks = collect(*engine->submit(r), 3);
  EXPECT_EQ(forks.last.usage.completion_tokens, 24);
  EXPECT_GE(settled_stats(*engine, 1).prefix_hit_blocks, 6u);  // 3 full prompt blocks, for each of 2 forks
  for (int32_t choice = 0; choice < 3; ++choice) {
    GenerationRequest single = r;
    single.n = 1;
    single.sampling.seed = 77 + uint64_t(choice);
    EXPECT_EQ(collect(*engine->submit(single)).tokens[0], forks.tokens[size_t(choice)]) << "choice " << choice;
  }
}

TEST(EngineScheduler, StopStringsEosAndErrors) {
  auto engine = make_toy_engine({}, {}, /*eos=*/{});
  std::vector<int32_t> prompt = prompt_of(6, 6);
  std::vector<int32_t> ref = ToyRunner::greedy_reference(prompt, 10, 64);
  std::string text;
  for (int32_t t : ref) text += char('a' + t % 26);
  GenerationRequest r = greedy(prompt, 10);
  r.stop = {text.substr(4, 2)};
  Collected c = collect(*engine->submit(r));
  EXPECT_EQ(c.finish[0], FinishReason::Stop);
  EXPECT_EQ(c.text[0], text.substr(0, text.find(text.substr(4, 2))));

  auto eos_engine = make_toy_engine({}, {}, /*eos=*/{ref[3]});
  Collected e = collect(*eos_engine->submit(greedy(prompt, 10)));
  EXPECT_EQ(e.finish[0], FinishReason::Stop);
  EXPECT_EQ(e.tokens[0].size(), size_t(std::find(ref.begin(), ref.end(), ref[3]) - ref.begin() + 1));

  Collected too_long = collect(*engine->submit(greedy(prompt_of(600, 1), 4)));
  EXPECT_EQ(too_long.finish[0], FinishReason::Error);
  EXPECT_NE(too_long.last.error.find("context"), std::string::npos) << too_long.last.error;
  Collected empty = collect(*engine->submit(greedy({}, 4)));
  EXPECT_EQ(empty.finish[0], FinishReason::Error);
}

TEST(EngineScheduler, GenerateHelperAndShutdownCancelsInFlight) {
  auto engine = make_toy_engine({.context = 100000, .n_blocks = 30000});
  int events = 0;
  GenerationEvent last = engine->generate(greedy(prompt_of(5, 1), 3), [&](const GenerationEvent&) { ++events; });
  EXPECT_TRUE(last.done);
  EXPECT_EQ(events, 3);
  auto handle = engine->submit(greedy(prompt_of(5, 2), 90000));
  handle->next();
  engine->shutdown();
  Collected rest = collect(*handle);
  EXPECT_EQ(rest.finish[0], FinishReason::Cancelled);
  Collected after = collect(*engine->submit(greedy(prompt_of(5, 3), 3)));
  EXPECT_EQ(after.finish[0], FinishReason::Error);
}

}  // namespace
}  // namespace brioche::engine
