// The engine on a hybrid model (Qwen 3.5 dense fixture, tests/fixtures/qwen35/
// dense: linear-attention layers with a recurrent state per sequence): a
// mixed batch of very different lengths, with a cancellation and
// preemptions, gives each request exactly the tokens it gets alone (and a
// preempted sequence's recompute reproduces its state bit for bit: equal
// logprobs); state slots are handed back; the prefix cache reuses a prompt
// up to a kept state snapshot (one at every block boundary a prompt
// crosses: a shared system prompt is reused), with exactly the tokens
// computed without it, also when snapshots are evicted; speculation gives
// the tokens of plain decoding (rejected drafts rolled out of the state).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/model_tokenizer.h"
#include "engine/proposer.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace brioche::engine {
namespace {

std::string fixture() { return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/qwen35/dense"; }

std::vector<int32_t> golden_ids(const char* key) {
  std::ifstream in(fixture() + "/golden.json");
  return nlohmann::json::parse(in)[key].get<std::vector<int32_t>>();
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // of each token, when the request asks for them
  FinishReason finish = FinishReason::Error;
  int32_t cached_prompt_tokens = -1;
};

Outcome collect(RequestHandle& handle) {
  Outcome out;
  while (std::optional<GenerationEvent> e = handle.next()) {
    EXPECT_NE(e->finish, FinishReason::Error) << e->error;
    out.tokens.insert(out.tokens.end(), e->tokens.begin(), e->tokens.end());
    for (const TokenLogprob& lp : e->logprobs) out.logprobs.push_back(lp.logprob);
    if (e->finish) out.finish = *e->finish;
    if (e->done) out.cached_prompt_tokens = e->usage.cached_prompt_tokens;
  }
  return out;
}

// Five prompts of 200, 13, 50, 90 and 3 tokens; seeded sampling for odd
// ones, greedy for even ones.
std::vector<GenerationRequest> requests() {
  const std::vector<int32_t> long_ids = golden_ids("long_ids"), short_ids = golden_ids("short_ids"),
                             prompt_ids = golden_ids("prompt_ids");
  std::vector<std::vector<int32_t>> prompts = {
      long_ids, short_ids, prompt_ids, {long_ids.begin() + 7, long_ids.begin() + 97}, {5, 6, 7}};
  std::vector<GenerationRequest> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt_tokens = prompts[i];
    if (i % 2 == 1) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = 1000 + i;
    } else {
      r.sampling.temperature = 0.0f;
    }
    r.max_tokens = 24;
    r.ignore_eos = true;
    out.push_back(std::move(r));
  }
  return out;
}

EngineOptions small_cache() {
  // 20 blocks of 16 positions: the 200-token prompt alone needs 14, so the
  // batch runs out of blocks and the newest sequences are preempted; 3
  // state slots: at most 3 sequences run at once.
  return {.model_path = fixture(),
          .kv = {.block_size = 16, .n_blocks = 20, .max_context = 256, .dtype = DType::F32, .state_slots = 3},
          .scheduler = {.max_batch_tokens = 64}};
}

TEST(Qwen35Engine, MixedBatchWithCancellationAndPreemptionGivesEachRequestItsSoloTokens) {
  auto engine = Engine::load(small_cache());
  // Request 2 (50-token prompt) asks for 200 tokens and is cancelled once
  // its first tokens arrive.
  auto batch = [] {
    std::vector<GenerationRequest> r = requests();
    r[2].max_tokens = 200;
    return r;
  };
  std::vector<Outcome> alone;
  for (GenerationRequest& r : batch()) alone.push_back(collect(*engine->submit(std::move(r))));
  ASSERT_EQ(alone[2].tokens.size(), 200u);

  std::vector<std::shared_ptr<RequestHandle>> handles = engine->submit_all(batch());
  Outcome cancelled;
  while (std::optional<GenerationEvent> e = handles[2]->next()) {
    cancelled.tokens.insert(cancelled.tokens.end(), e->tokens.begin(), e->tokens.end());
    if (e->finish) cancelled.finish = *e->finish;
    if (!cancelled.tokens.empty()) handles[2]->cancel();
  }
  // What it produced is its solo prefix, cut by the cancellation (unless all
  // 200 tokens came before the engine saw it).
  ASSERT_LE(cancelled.tokens.size(), alone[2].tokens.size());
  EXPECT_TRUE(std::equal(cancelled.tokens.begin(), cancelled.tokens.end(), alone[2].tokens.begin()));
  EXPECT_TRUE(cancelled.finish == FinishReason::Cancelled || cancelled.tokens.size() == 200u);
  std::vector<Outcome> together;
  for (auto& h : handles) together.push_back(collect(*h));
  for (size_t i = 0; i < handles.size(); ++i) {
    if (i == 2) continue;
    ASSERT_EQ(alone[i].tokens.size(), 24u);
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(together[i].finish, FinishReason::Length) << "request " << i;
  }
  EngineStats s = engine->stats();
  for (int i = 0; i < 400 && (s.running > 0 || s.waiting > 0 || s.kv_blocks_used > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    s = engine->stats();
  }
  EXPECT_GT(s.preemptions, 0u);
  EXPECT_EQ(s.kv_blocks_used, 0);
  // Every slot came back: three more requests run side by side.
  std::vector<GenerationRequest> again = batch();
  again.resize(3);
  std::vector<std::shared_ptr<RequestHandle>> more = engine->submit_all(std::move(again));
  for (size_t i = 0; i < more.size(); ++i) EXPECT_EQ(collect(*more[i]).tokens, alone[i].tokens) << "request " << i;
}

// Under forced preemption (20 blocks for five prompts of up to 200 tokens),
// each preempted sequence recomputes its prompt and generated tokens in
// forwards cut where its first computation's were (its prompt's end, each
// decode step): its state is the one it had, bit for bit, so every token's
// logprob equals the solo run's exactly, not just the tokens.
TEST(Qwen35Engine, PreemptedSequencesRecomputeTheirStateBitForBit) {
  auto engine = Engine::load(small_cache());
  auto batch = [] {
    std::vector<GenerationRequest> r = requests();
    for (GenerationRequest& req : r) {
      req.top_logprobs = 0;
      req.max_tokens = 40;
    }
    return r;
  };
  std::vector<Outcome> alone;
  for (GenerationRequest& r : batch()) alone.push_back(collect(*engine->submit(std::move(r))));
  const uint64_t preemptions_before = engine->stats().preemptions;
  std::vector<std::shared_ptr<RequestHandle>> handles = engine->submit_all(batch());
  for (size_t i = 0; i < handles.size(); ++i) {
    const Outcome together = collect(*handles[i]);
    ASSERT_EQ(alone[i].logprobs.size(), 40u);
    EXPECT_EQ(together.tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(together.logprobs, alone[i].logprobs) << "request " << i;
  }
  EXPECT_GT(engine->stats().preemptions, preemptions_before);
}

EngineOptions without_prefix_cache() {
  EngineOptions o = small_cache();
  o.scheduler.prefix_cache = false;
  return o;
}

// A repeated prompt (90 tokens) starts from the state snapshot kept at its
// last 16-position boundary (lcm of the 16-position block and the 16-row
// delta-rule chunk): 80 prompt tokens come from the cache, and the tokens
// equal those of an engine without a prefix cache, greedy and seeded.
TEST(Qwen35Engine, RepeatedPromptStartsFromItsStateSnapshot) {
  auto engine = Engine::load(small_cache());
  auto plain = Engine::load(without_prefix_cache());
  for (size_t i : {3, 0}) {  // greedy 90 tokens (snapshot at 80); greedy 200 tokens (at 192)
    GenerationRequest r = requests()[i];
    const Outcome reference = collect(*plain->submit(r));
    const Outcome first = collect(*engine->submit(r));
    const Outcome second = collect(*engine->submit(r));
    EXPECT_EQ(first.tokens, reference.tokens) << "request " << i;
    EXPECT_EQ(second.tokens, reference.tokens) << "request " << i;
    EXPECT_EQ(first.cached_prompt_tokens, 0);
    EXPECT_EQ(second.cached_prompt_tokens, (int32_t(r.prompt_tokens.size()) - 1) / 16 * 16) << "request " << i;
  }
  GenerationRequest seeded = requests()[3];
  seeded.sampling = {.temperature = 0.9f, .top_p = 0.95f, .seed = 77};
  const Outcome reference = collect(*plain->submit(seeded));
  EXPECT_EQ(collect(*engine->submit(seeded)).tokens, reference.tokens);
  EXPECT_GT(engine->stats().prefix_hit_blocks, 0u);
  EXPECT_EQ(plain->stats().prefix_hit_blocks, 0u);
}

// A conversation's next turn (its prompt: the last prompt, the answer and a
// new message) reuses the last prompt's snapshot; a prompt that shares only
// a part of a cached prompt below any snapshot computes everything; both
// give the tokens of an engine without a prefix cache.
TEST(Qwen35Engine, NextTurnReusesThePreviousPromptAndPartialSharesDoNot) {
  auto engine = Engine::load(small_cache());
  auto plain = Engine::load(without_prefix_cache());
  GenerationRequest turn1 = requests()[3];  // 90 tokens
  const Outcome answer = collect(*engine->submit(turn1));
  GenerationRequest turn2 = turn1;
  turn2.prompt_tokens.insert(turn2.prompt_tokens.end(), answer.tokens.begin(), answer.tokens.end());
  for (int32_t t : {11, 12, 13, 14, 15}) turn2.prompt_tokens.push_back(t);  // 119 tokens
  const Outcome reused = collect(*engine->submit(turn2));
  EXPECT_EQ(reused.cached_prompt_tokens, 80);
  EXPECT_EQ(reused.tokens, collect(*plain->submit(turn2)).tokens);

  // The first 40 tokens of the cached prompt, then others: its snapshots at
  // 16 and 32 were replaced by deeper ones (3 slots keep 80, 96, 112).
  GenerationRequest partial = turn1;
  partial.prompt_tokens.resize(40);
  for (int32_t t = 0; t < 40; ++t) partial.prompt_tokens.push_back(100 + t);
  const Outcome computed = collect(*engine->submit(partial));
  EXPECT_EQ(computed.cached_prompt_tokens, 0);
  EXPECT_EQ(computed.tokens, collect(*plain->submit(partial)).tokens);
}

// Requests with one 48-token system prompt (3 blocks) and different user
// messages: the first keeps a snapshot at each block boundary its prompt
// crosses, so the others start from the one at the system prompt's end
// (48 cached tokens), with the tokens of an engine without a prefix cache,
// greedy and seeded.
TEST(Qwen35Engine, SharedSystemPromptIsReusedAcrossDifferentUserMessages) {
  auto engine = Engine::load(small_cache());
  auto plain = Engine::load(without_prefix_cache());
  const std::vector<int32_t> long_ids = golden_ids("long_ids");
  const std::vector<int32_t> system(long_ids.begin(), long_ids.begin() + 48);
  auto ask = [&](int32_t first_user_token, int32_t user_tokens, std::optional<uint64_t> seed) {
    GenerationRequest r;
    r.prompt_tokens = system;
    for (int32_t t = 0; t < user_tokens; ++t) r.prompt_tokens.push_back((first_user_token + 7 * t) % 500);
    r.sampling.temperature = seed ? 0.9f : 0.0f;
    r.sampling.seed = seed;
    r.max_tokens = 16;
    r.ignore_eos = true;
    return r;
  };
  const std::vector<GenerationRequest> turns = {ask(300, 30, std::nullopt), ask(11, 21, std::nullopt),
                                                ask(50, 40, uint64_t(5)), ask(401, 9, uint64_t(6))};
  for (size_t i = 0; i < turns.size(); ++i) {
    const Outcome got = collect(*engine->submit(turns[i]));
    EXPECT_EQ(got.cached_prompt_tokens, i == 0 ? 0 : 48) << "request " << i;
    EXPECT_EQ(got.tokens, collect(*plain->submit(turns[i])).tokens) << "request " << i;
  }
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.state_snapshots_restored, 3u);
  EXPECT_GE(s.state_snapshots_saved, 4u);  // 16, 32, 48, 64 of the first prompt at least
}

// Memory pressure, with prompts of up to 200 tokens: two snapshot slots
// (snapshots replaced, LRU), then 16 slots and 20 KV blocks (snapshots
// freed with their evicted blocks). Every request still gets the tokens of
// an engine without a prefix cache; what is reused is what is still kept.
TEST(Qwen35Engine, MemoryPressureEvictsSnapshotsWithoutWrongOutput) {
  auto plain = Engine::load(without_prefix_cache());
  std::vector<GenerationRequest> order = requests();
  const std::vector<GenerationRequest> again = requests();
  order.insert(order.end(), again.begin(), again.end());  // each prompt twice, all in turn
  order.push_back(requests()[3]);
  order.push_back(requests()[3]);  // twice in a row: reused from its last boundary
  std::vector<Outcome> reference;
  for (const GenerationRequest& r : order) reference.push_back(collect(*plain->submit(r)));
  for (int32_t slots : {2, 16}) {
    EngineOptions tight = small_cache();
    tight.kv.state_snapshots = slots;
    auto engine = Engine::load(tight);
    for (size_t i = 0; i < order.size(); ++i) {
      const Outcome got = collect(*engine->submit(order[i]));
      EXPECT_EQ(got.tokens, reference[i].tokens) << slots << " slots, request " << i;
      if (i + 1 == order.size()) EXPECT_EQ(got.cached_prompt_tokens, 80) << slots << " slots";
    }
    const EngineStats s = engine->stats();
    EXPECT_EQ(s.state_snapshot_slots, slots);
    EXPECT_LE(s.state_snapshots_kept, slots);
    EXPECT_GT(slots == 2 ? s.state_snapshots_replaced : s.state_snapshots_dropped, 0u) << slots << " slots";
    EXPECT_GT(s.state_snapshots_restored, 0u);
    std::printf(
        "[ measured ] %d slots: snapshots saved %llu, replaced %llu, freed with their block %llu, restored %llu\n",
        slots, (unsigned long long)s.state_snapshots_saved, (unsigned long long)s.state_snapshots_replaced,
        (unsigned long long)s.state_snapshots_dropped, (unsigned long long)s.state_snapshots_restored);
  }
}

// n > 1: the choices run in their own slots from the prompt.
TEST(Qwen35Engine, ForkedChoicesEachGetTheirSeededTokens) {
  auto engine = Engine::load(small_cache());
  GenerationRequest r = requests()[1];
  r.n = 3;
  std::vector<std::vector<int32_t>> by_choice(3);
  auto handle = engine->submit(r);
  while (std::optional<GenerationEvent> e = handle->next()) {
    ASSERT_NE(e->finish, FinishReason::Error) << e->error;
    by_choice[size_t(e->choice)].insert(by_choice[size_t(e->choice)].end(), e->tokens.begin(), e->tokens.end());
  }
  for (int choice = 0; choice < 3; ++choice) {
    GenerationRequest solo = requests()[1];
    solo.sampling.seed = *solo.sampling.seed + uint64_t(choice);  // choice i samples with seed + i
    EXPECT_EQ(by_choice[size_t(choice)], collect(*engine->submit(solo)).tokens) << "choice " << choice;
  }
}

// Proposes the continuation of a known reference sequence (the plain
// engine's greedy tokens), with the one at every 7th position wrong: steps
// whose drafts are all accepted, and steps that reject some,
// deterministically.
class ReferenceProposer final : public DraftProposer {
 public:
  explicit ReferenceProposer(std::vector<std::vector<int32_t>> references) : references_(std::move(references)) {}
  const char* name() const override { return "reference"; }
  std::vector<Draft> propose(std::span<const DraftQuery> queries) override {
    std::vector<Draft> out(queries.size());
    for (size_t q = 0; q < queries.size(); ++q) {
      const std::span<const int32_t> tokens = queries[q].tokens;
      for (const std::vector<int32_t>& ref : references_) {
        if (ref.size() <= tokens.size() || !std::equal(tokens.begin(), tokens.end(), ref.begin())) continue;
        for (size_t i = tokens.size(); i < ref.size() && out[q].tokens.size() < size_t(queries[q].max_tokens); ++i)
          out[q].tokens.push_back(i % 7 == 6 ? (ref[i] + 1) % 512 : ref[i]);
      }
    }
    return out;
  }

 private:
  std::vector<std::vector<int32_t>> references_;
};

// Speculative decoding: draft rows run as decode steps (one piece each, the
// recurrent form), the state before them is kept in a snapshot slot, and
// rejected drafts are rolled back from it (the accepted ones computed
// again). Greedy requests, alone and batched, get the tokens and logprobs
// of decoding without speculation, bit for bit, with drafts both accepted
// and rejected; prompt lookup runs too (on random weights it rarely guesses
// right).
TEST(Qwen35Engine, SpeculationGivesTheTokensOfPlainDecoding) {
  EngineOptions speculative = small_cache();
  speculative.scheduler.speculative_tokens = 4;
  speculative.scheduler.speculative_adaptive = false;
  auto plain = Engine::load(small_cache());
  const std::vector<int32_t> long_ids = golden_ids("long_ids");
  std::vector<GenerationRequest> batch;
  for (int32_t period : {5, 7, 12}) {  // repetitive prompts, for prompt lookup
    GenerationRequest r;
    for (int32_t i = 0; i < 60; ++i) r.prompt_tokens.push_back(long_ids[size_t(i % period)]);
    r.sampling.temperature = 0.0f;
    r.max_tokens = 40;
    r.ignore_eos = true;
    r.top_logprobs = 0;
    batch.push_back(std::move(r));
  }
  std::vector<Outcome> reference;
  std::vector<std::vector<int32_t>> sequences;
  for (const GenerationRequest& r : batch) {
    reference.push_back(collect(*plain->submit(r)));
    sequences.push_back(r.prompt_tokens);
    sequences.back().insert(sequences.back().end(), reference.back().tokens.begin(), reference.back().tokens.end());
  }
  auto model = std::shared_ptr<model::Model>(model::Model::load(fixture(), {.max_context = 256}));
  for (bool lookup : {false, true}) {
    std::unique_ptr<Engine> engine =
        lookup ? Engine::load(speculative)
               : std::make_unique<Engine>(make_model_runner(model, speculative.kv),
                                          make_text_codec(load_model_tokenizer(*model)), speculative.scheduler,
                                          std::make_unique<ReferenceProposer>(sequences));
    for (size_t i = 0; i < batch.size(); ++i) {
      const Outcome alone = collect(*engine->submit(batch[i]));
      EXPECT_EQ(alone.tokens, reference[i].tokens) << "request " << i << (lookup ? ", prompt lookup" : "");
      EXPECT_EQ(alone.logprobs, reference[i].logprobs) << "request " << i << (lookup ? ", prompt lookup" : "");
    }
    std::vector<std::shared_ptr<RequestHandle>> handles = engine->submit_all(batch);
    for (size_t i = 0; i < handles.size(); ++i) {
      const Outcome together = collect(*handles[i]);
      EXPECT_EQ(together.tokens, reference[i].tokens) << "batched request " << i;
      EXPECT_EQ(together.logprobs, reference[i].logprobs) << "batched request " << i;
    }
    const EngineStats s = engine->stats();
    EXPECT_GT(s.spec_draft_tokens, s.spec_accepted_tokens);  // some rejected: rolled back
    if (!lookup) EXPECT_GT(s.spec_accepted_tokens, s.spec_draft_tokens / 3);
    std::printf("[ measured ] %s: %llu steps for %zu x 80 tokens, %llu verify steps, %llu drafts, %llu accepted\n",
                lookup ? "prompt lookup" : "reference drafts", (unsigned long long)s.steps, batch.size(),
                (unsigned long long)s.spec_verify_steps, (unsigned long long)s.spec_draft_tokens,
                (unsigned long long)s.spec_accepted_tokens);
  }
}

// Without snapshot slots there is nowhere to keep the state before the
// drafts: refused at start, with what to change.
TEST(Qwen35Engine, SpeculationWithoutSnapshotSlotsIsRefused) {
  EngineOptions options = small_cache();
  options.scheduler.speculative_tokens = 4;
  options.kv.state_snapshots = 0;
  try {
    Engine::load(options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("speculative decoding of a hybrid model needs state snapshot slots"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace brioche::engine
