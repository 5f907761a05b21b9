// Speculative decoding (prompt lookup, and a draft model on the default model) in the engine: the same tokens as
// without it. On the toy model (whose logits are read back through the
// block tables, so a stale draft K/V or a wrong rollback changes tokens) and
// on the default model (greedy, JSON schema, stop strings, penalties,
// batched). Sampled: the same distribution as without, also under a grammar. Every equality test also asserts that drafts were accepted, so
// none passes without speculation taking place.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "engine/engine.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/vocabulary.h"
#include "model/model.h"
#include "chi_square.h"
#include "toy_model.h"

namespace brioche::engine {
namespace {

using testing::expect_same_distribution;
using testing::ToyCodec;
using testing::ToyConfig;
using testing::ToyRunner;

struct Output {
  std::string text;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::Error;
};

Output collect(RequestHandle& handle) {
  Output out;
  while (std::optional<GenerationEvent> e = handle.next()) {
    EXPECT_NE(e->finish, FinishReason::Error) << e->error;
    out.text += e->text;
    out.tokens.insert(out.tokens.end(), e->tokens.begin(), e->tokens.end());
    if (e->finish) out.finish = *e->finish;
  }
  return out;
}

SchedulerOptions speculating(int32_t tokens = 4) {
  SchedulerOptions options;
  options.speculative_tokens = tokens;
  return options;
}

// ---- toy model ---------------------------------------------------------------

TEST(EngineSpeculativeToy, GreedyTokensEqualTheUncachedReferenceAndDraftsAreAccepted) {
  // A 3-token vocabulary: greedy continuations repeat, so prompt lookup
  // guesses right often; blocks of 4 make drafts cross block boundaries.
  ToyConfig config{.vocab = 3, .context = 256, .block_size = 4, .n_blocks = 64};
  Engine engine(std::make_unique<ToyRunner>(config), std::make_unique<ToyCodec>(), speculating(5));
  for (int i = 0; i < 40; ++i) {
    std::vector<int32_t> prompt;
    for (int j = 0; j < 3 + i % 7; ++j) prompt.push_back((i * 7 + j * j) % 3);
    GenerationRequest r{.prompt_tokens = prompt, .sampling = {.temperature = 0}, .max_tokens = 30 + i % 5};
    EXPECT_EQ(collect(*engine.submit(r)).tokens, ToyRunner::greedy_reference(prompt, r.max_tokens, config.vocab))
        << "prompt " << i;
  }
  engine.shutdown();  // the last step's stats are in once the engine thread is done
  EngineStats s = engine.stats();
  EXPECT_GT(s.spec_verify_steps, 0u);
  EXPECT_GT(s.spec_accepted_tokens, 0u);
  EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens);  // rejections (and their rollback) happened too
  EXPECT_EQ(s.kv_blocks_used, 0) << "blocks of rejected drafts must go back";
}

TEST(EngineSpeculativeToy, BatchedSequencesKeepTheirTokens) {
  ToyConfig config{.vocab = 3, .context = 256, .block_size = 4, .n_blocks = 64};
  Engine engine(std::make_unique<ToyRunner>(config), std::make_unique<ToyCodec>(), speculating(3));
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 4; ++i)
    requests.push_back(
        {.prompt_tokens = {i % 3, (i + 1) % 3, 2, i % 2}, .sampling = {.temperature = 0}, .max_tokens = 40});
  std::vector<std::shared_ptr<RequestHandle>> handles = engine.submit_all(requests);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(collect(*handles[size_t(i)]).tokens,
              ToyRunner::greedy_reference(requests[size_t(i)].prompt_tokens, 40, config.vocab));
  EXPECT_GT(engine.stats().spec_accepted_tokens, 0u);
}

TEST(EngineSpeculativeToy, RequestOptOutAndLargeBatchesDoNotSpeculate) {
  ToyConfig config{.vocab = 3, .context = 256, .block_size = 4, .n_blocks = 64};
  SchedulerOptions options = speculating(4);
  options.speculative_max_batch = 2;
  Engine engine(std::make_unique<ToyRunner>(config), std::make_unique<ToyCodec>(), options);
  GenerationRequest r{.prompt_tokens = {0, 1, 2, 0, 1}, .sampling = {.temperature = 0}, .max_tokens = 40};
  r.speculative = false;
  EXPECT_EQ(collect(*engine.submit(r)).tokens, ToyRunner::greedy_reference(r.prompt_tokens, 40, config.vocab));
  EXPECT_EQ(engine.stats().spec_verify_steps, 0u);
  // Three decoding together: above speculative_max_batch from their first decode on.
  r.speculative = true;
  std::vector<std::shared_ptr<RequestHandle>> handles = engine.submit_all({r, r, r});
  for (auto& h : handles) collect(*h);
  EXPECT_EQ(engine.stats().spec_verify_steps, 0u);
}

TEST(EngineSpeculativeToy, SeededSampledRequestsAreReproducible) {
  ToyConfig config{.vocab = 3, .context = 256, .block_size = 4, .n_blocks = 64};
  Engine engine(std::make_unique<ToyRunner>(config), std::make_unique<ToyCodec>(), speculating(4));
  GenerationRequest r{
      .prompt_tokens = {0, 1, 2, 0, 1, 2}, .sampling = {.temperature = 0.3f, .seed = 99}, .max_tokens = 50};
  std::vector<int32_t> first = collect(*engine.submit(r)).tokens;
  EXPECT_EQ(first.size(), 50u);
  EXPECT_EQ(collect(*engine.submit(r)).tokens, first);
  EXPECT_GT(engine.stats().spec_verify_steps, 0u);
}

// Sampled requests through the engine: the first four generated tokens of
// 4,000 seeds with speculation against 4,000 other seeds without, as a
// two-sample chi-square test of homogeneity over the 3^4 sequences (cells
// with fewer than 20 samples in both runs together pooled into one), at
// significance 0.001. Deterministic: fixed seeds. Tokens 2-4 come from
// verification rows (the prompt's n-grams always match in a 3-token
// vocabulary), so a wrong rule, row or penalty input shows up here.
TEST(EngineSpeculativeToy, SampledSequencesFollowTheSameDistributionAsWithout) {
  ToyConfig config{.vocab = 3, .context = 64, .block_size = 4, .n_blocks = 2048};
  auto counts_of = [&](bool speculative, uint64_t first_seed) {
    SchedulerOptions options = speculating(3);
    options.speculative_max_batch = 1 << 20;
    options.speculative_tokens = speculative ? 3 : 0;
    Engine engine(std::make_unique<ToyRunner>(config), std::make_unique<ToyCodec>(), options);
    std::vector<int> counts(81, 0);
    for (int batch = 0; batch < 40; ++batch) {
      std::vector<GenerationRequest> requests;
      for (int i = 0; i < 100; ++i) {
        GenerationRequest r{.prompt_tokens = {0, 1, 2, 0, 1},
                            .sampling = {.temperature = 3.0f,
                                         .top_k = 0,
                                         .repetition_penalty = 1.1f,
                                         .seed = first_seed + uint64_t(batch * 100 + i)},
                            .max_tokens = 4};
        requests.push_back(std::move(r));
      }
      for (auto& handle : engine.submit_all(std::move(requests))) {
        std::vector<int32_t> t = collect(*handle).tokens;
        EXPECT_EQ(t.size(), 4u);
        if (t.size() == 4) ++counts[size_t(((t[0] * 3 + t[1]) * 3 + t[2]) * 3 + t[3])];
      }
    }
    EngineStats s = engine.stats();
    if (speculative)
      EXPECT_GT(s.spec_accepted_tokens, 1000u);
    else
      EXPECT_EQ(s.spec_verify_steps, 0u);
    return counts;
  };
  expect_same_distribution(counts_of(true, 1'000'000), counts_of(false, 2'000'000));
}

// The same under a grammar: the regex (a[bc]|b[ac]|c[ab])+ forbids the
// token before it at every second position, so the mask of each verify row
// depends on the drafts accepted before it, and prompt lookup's matches
// (from "abcab") are sometimes passed over or cut by it; all three
// penalties are on, and each verify row must see the drafts accepted before
// it as output (with them seen as output only after the step, this test
// fails: chi-square 180 against a critical 65). 4,000 seeded
// requests with speculation against 4,000 without, first four tokens (36
// sequences the grammar allows), two-sample chi-square at 0.001.
TEST(EngineSpeculativeToy, SampledSequencesUnderAGrammarFollowTheSameDistributionAsWithout) {
  ToyConfig config{.vocab = 3, .context = 64, .block_size = 4, .n_blocks = 2048};
  grammar::GrammarCache cache(std::make_shared<const grammar::Vocabulary>(std::vector<std::string>{"a", "b", "c"},
                                                                          grammar::VocabularyOptions{}));
  auto compiled = cache.get(grammar::Grammar::from_regex("(a[bc]|b[ac]|c[ab])+"));
  auto counts_of = [&](bool speculative, uint64_t first_seed) {
    SchedulerOptions options = speculating(3);
    options.speculative_max_batch = 1 << 20;
    options.speculative_tokens = speculative ? 3 : 0;
    Engine engine(std::make_unique<ToyRunner>(config), std::make_unique<ToyCodec>(), options);
    std::vector<int> counts(81, 0);
    for (int batch = 0; batch < 40; ++batch) {
      std::vector<GenerationRequest> requests;
      for (int i = 0; i < 100; ++i) {
        GenerationRequest r{.prompt_tokens = {0, 1, 2, 0, 1},
                            .sampling = {.temperature = 3.0f,
                                         .top_k = 0,
                                         .repetition_penalty = 1.1f,
                                         .presence_penalty = 1.5f,
                                         .frequency_penalty = 1.5f,
                                         .seed = first_seed + uint64_t(batch * 100 + i)},
                            .max_tokens = 4};
        r.constraint.compiled = compiled;
        requests.push_back(std::move(r));
      }
      for (auto& handle : engine.submit_all(std::move(requests))) {
        std::vector<int32_t> t = collect(*handle).tokens;
        EXPECT_EQ(t.size(), 4u);
        if (t.size() != 4) continue;
        EXPECT_TRUE(t[1] != t[0] && t[3] != t[2]) << "outside the grammar";
        ++counts[size_t(((t[0] * 3 + t[1]) * 3 + t[2]) * 3 + t[3])];
      }
    }
    engine.shutdown();
    EngineStats s = engine.stats();
    if (speculative) {
      EXPECT_GT(s.spec_accepted_tokens, 1000u);
      EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens);
    } else {
      EXPECT_EQ(s.spec_verify_steps, 0u);
    }
    return counts;
  };
  expect_same_distribution(counts_of(true, 3'000'000), counts_of(false, 4'000'000));
}

// ---- default model -----------------------------------------------------------

std::string default_model() {
  if (const char* env = std::getenv("BRIOCHE_MODEL")) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The default model speculating with prompt lookup, or with a draft model:
// the same file requantized to Q8_0 at load (close to the Q4_1 target but
// not equal, so drafts are mostly accepted and sometimes rejected), at a
// fixed length (a draft as costly as the target would rightly not be
// asked for drafts by the adaptive length).
std::unique_ptr<Engine> load_or_skip(const std::string& proposer) {
  EngineOptions options{.model_path = default_model(), .kv = {.max_context = 1024}, .scheduler = speculating(4)};
  if (!std::filesystem::exists(options.model_path)) return nullptr;
  if (proposer == "draft-model") {
    options.draft_model = model::Model::load(options.model_path, {.max_context = 1024, .convert_weights = DType::Q8_0});
    options.scheduler.speculative_adaptive = false;
  }
  return Engine::load(options);
}

class EngineSpeculativeModel : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Engine> load_or_skip() { return engine::load_or_skip(GetParam()); }
};

const char* kEditPrompt =
    "Rewrite the paragraph, replacing the word \"cat\" with \"dog\".\n\n"
    "The cat sat on the mat near the window of the old house. Every morning the cat watched the birds in "
    "the garden, and every evening the cat slept by the fire.\n\nRewritten:\n";

// Greedy `request` with and without speculation (the same engine: the
// request opts out): the same tokens, text and finish. Returns the drafts
// accepted in the speculative run.
uint64_t expect_same_with_and_without(Engine& engine, GenerationRequest request, const std::string& what) {
  request.speculative = false;
  Output plain = collect(*engine.submit(request));
  request.speculative = true;
  const uint64_t before = engine.stats().spec_accepted_tokens;
  Output spec = collect(*engine.submit(request));
  EXPECT_EQ(spec.tokens, plain.tokens) << what;
  EXPECT_EQ(spec.text, plain.text) << what;
  EXPECT_EQ(spec.finish, plain.finish) << what;
  return engine.stats().spec_accepted_tokens - before;
}

TEST_P(EngineSpeculativeModel, GreedyTokensAreTheSameAndEditingAcceptsDrafts) {
  auto engine = load_or_skip();
  if (!engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  const char* prompts[] = {
      "The capital of France is",
      "def fibonacci(n):",
      "List the colors: red, green, blue, red, green,",
      "Copy this sentence exactly: the quick brown fox jumps over the lazy dog. Copy:",
  };
  for (const char* prompt : prompts) {
    GenerationRequest r{
        .prompt_tokens = engine->tokenize(prompt, {.add_bos = true}), .sampling = {.temperature = 0}, .max_tokens = 32};
    expect_same_with_and_without(*engine, r, prompt);
  }
  GenerationRequest edit{.prompt_tokens = engine->tokenize(kEditPrompt, {.add_bos = true}),
                         .sampling = {.temperature = 0},
                         .max_tokens = 48};
  EXPECT_GT(expect_same_with_and_without(*engine, edit, "editing"), 0u) << "an editing prompt must accept drafts";
  // Penalties see the accepted drafts as output, as an unspeculated run does.
  edit.sampling.repetition_penalty = 1.2f;
  edit.sampling.frequency_penalty = 0.3f;
  expect_same_with_and_without(*engine, edit, "editing with penalties");
}

TEST_P(EngineSpeculativeModel, StopStringsAndMaxTokensEndAsWithout) {
  auto engine = load_or_skip();
  if (!engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  GenerationRequest edit{.prompt_tokens = engine->tokenize(kEditPrompt, {.add_bos = true}),
                         .sampling = {.temperature = 0},
                         .max_tokens = 48};
  edit.stop = {"garden"};
  uint64_t accepted = expect_same_with_and_without(*engine, edit, "stop string");
  edit.stop.clear();
  for (int32_t max_tokens : {1, 2, 7, 13}) {
    edit.max_tokens = max_tokens;
    accepted += expect_same_with_and_without(*engine, edit, "max_tokens " + std::to_string(max_tokens));
  }
  EXPECT_GT(accepted, 0u);
}

TEST_P(EngineSpeculativeModel, JsonSchemaGreedyOutputIsTheSame) {
  auto engine = load_or_skip();
  if (!engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  grammar::GrammarCache cache(grammar_vocabulary(*engine->tokenizer(), engine->vocab_size()));
  const char* schema = R"({"type":"object","properties":{
    "name":{"type":"string","maxLength":24},"age":{"type":"integer","minimum":0,"maximum":120},
    "city":{"type":"string","maxLength":24}},"required":["name","age","city"],"additionalProperties":false})";
  const char* prompt =
      "Extract as JSON: Name: Marie Curie. Age: 66. City: Paris.\n"
      "{\"name\": \"Marie Curie\", \"age\": 66, \"city\": \"Paris\"}\n"
      "Extract as JSON: Name: Alan Turing. Age: 41. City: Wilmslow.\n";
  uint64_t accepted = 0;
  for (bool jump_forward : {false, true}) {
    GenerationRequest r{
        .prompt_tokens = engine->tokenize(prompt, {.add_bos = true}), .sampling = {.temperature = 0}, .max_tokens = 60};
    r.constraint.compiled = cache.get(grammar::Grammar::from_json_schema(schema));
    r.constraint.jump_forward = jump_forward;
    accepted += expect_same_with_and_without(*engine, r, jump_forward ? "json, jump-forward" : "json");
  }
  EXPECT_GT(accepted, 0u);
}

TEST_P(EngineSpeculativeModel, ChoicesAndLogprobsAreTheSame) {
  auto engine = load_or_skip();
  if (!engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  GenerationRequest edit{.prompt_tokens = engine->tokenize(kEditPrompt, {.add_bos = true}),
                         .sampling = {.temperature = 0},
                         .max_tokens = 32};
  edit.top_logprobs = 2;
  edit.n = 2;  // two choices decoding together, both speculating
  std::vector<int32_t> tokens[2][2];
  std::vector<float> logprobs[2][2];
  for (int spec = 0; spec < 2; ++spec) {
    edit.speculative = spec == 1;
    std::shared_ptr<RequestHandle> handle = engine->submit(edit);
    while (std::optional<GenerationEvent> e = handle->next()) {
      ASSERT_NE(e->finish, FinishReason::Error) << e->error;
      if (e->tokens.empty()) continue;
      ASSERT_EQ(e->logprobs.size(), e->tokens.size());
      for (size_t t = 0; t < e->tokens.size(); ++t) {
        tokens[spec][e->choice].push_back(e->tokens[t]);
        logprobs[spec][e->choice].push_back(e->logprobs[t].logprob);
        EXPECT_EQ(e->logprobs[t].top.size(), 2u);
      }
    }
  }
  for (int choice = 0; choice < 2; ++choice) {
    EXPECT_EQ(tokens[1][choice], tokens[0][0]) << "choice " << choice;
    ASSERT_EQ(logprobs[1][choice].size(), logprobs[0][0].size());
    for (size_t t = 0; t < logprobs[0][0].size(); ++t)
      EXPECT_NEAR(logprobs[1][choice][t], logprobs[0][0][t], 1e-4f) << "choice " << choice << " token " << t;
  }
  EXPECT_GT(engine->stats().spec_accepted_tokens, 0u);
}

INSTANTIATE_TEST_SUITE_P(Proposers, EngineSpeculativeModel, ::testing::Values("prompt-lookup", "draft-model"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "draft-model" ? std::string("DraftModel") : std::string("PromptLookup");
                         });

}  // namespace
}  // namespace brioche::engine
