// Proposing under the request's grammar (docs/speculative.md, "Under a
// grammar"), on the default model (SmolLM2-135M Q4_1, CPU):
//   * a draft model masks its logits with the grammar (walking a rollback of
//     the request's matcher): greedy output under a JSON schema and a regex
//     equals decoding without speculation, and a draft that would guess a
//     forbidden token first has all its drafts kept (proposing blind, every
//     guess is cut before the forward);
//   * prompt lookup passes over an n-gram match whose continuation the
//     grammar forbids and takes an earlier one it allows;
//   * the request's matcher is where it was after proposing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include "engine/constraint.h"
#include "engine/draft_model_proposer.h"
#include "engine/model_tokenizer.h"
#include "engine/engine.h"
#include "engine/proposer.h"
#include "grammar/grammar.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace brioche::engine {
namespace {

std::string default_model() {
  if (const char* env = std::getenv("BRIOCHE_MODEL")) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

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

// The default model as the target with a draft model loaded from the same
// file: `draft_dtype` Q8_0 (close, not equal: some drafts rejected) or
// nullopt (the stored Q4_1: the target's own weights, every masked draft is
// the target's choice). Fixed length K = 4, so each step asks for 4 drafts.
std::unique_ptr<Engine> load_or_null(std::optional<DType> draft_dtype, bool grammar_drafts) {
  EngineOptions options{.model_path = default_model(), .kv = {.max_context = 1024}};
  if (!std::filesystem::exists(options.model_path)) return nullptr;
  options.scheduler.speculative_tokens = 4;
  options.scheduler.speculative_adaptive = false;
  options.scheduler.speculative_grammar_drafts = grammar_drafts;
  model::LoadOptions load{.max_context = 1024};
  if (draft_dtype) load.convert_weights = *draft_dtype;
  options.draft_model = model::Model::load(options.model_path, load);
  return Engine::load(options);
}

#define LOAD_OR_SKIP(engine, dtype, grammar_drafts)                     \
  std::unique_ptr<Engine> engine = load_or_null(dtype, grammar_drafts); \
  if (!engine) GTEST_SKIP() << "skipped: default model not found at " << default_model()

GenerationRequest constrained(Engine& engine, grammar::GrammarCache& cache, const std::string& prompt,
                              const grammar::Grammar& g, int32_t max_tokens) {
  GenerationRequest r{.prompt_tokens = engine.tokenize(prompt, {.add_bos = true}),
                      .sampling = {.temperature = 0},
                      .max_tokens = max_tokens};
  r.constraint.compiled = cache.get(g);
  return r;
}

const char* kSchema = R"({"type":"object","properties":{
    "name":{"type":"string","maxLength":24},"age":{"type":"integer","minimum":0,"maximum":120},
    "city":{"type":"string","maxLength":24}},"required":["name","age","city"],"additionalProperties":false})";
const char* kSchemaPrompt = "Who was Alan Turing? Answer in one sentence.\n";
// A pattern the model would not write after this prompt: unmasked, its
// first guess is always forbidden.
const char* kRegex = R"(([A-Z][0-9]-){6}[A-Z][0-9])";
const char* kRegexPrompt = "Write a short poem about the sea.\n";

struct Drafting {
  Output plain, spec;
  uint64_t drafts = 0, accepted = 0, verify_steps = 0;
};

// `r` without speculation, then with it, on one engine (the request opts out).
Drafting with_and_without(Engine& engine, GenerationRequest r) {
  Drafting d;
  r.speculative = false;
  d.plain = collect(*engine.submit(r));
  r.speculative = true;
  const EngineStats before = engine.stats();
  d.spec = collect(*engine.submit(r));
  const EngineStats after = engine.stats();
  d.drafts = after.spec_draft_tokens - before.spec_draft_tokens;
  d.accepted = after.spec_accepted_tokens - before.spec_accepted_tokens;
  d.verify_steps = after.spec_verify_steps - before.spec_verify_steps;
  return d;
}

TEST(EngineDraftGrammar, GreedyOutputUnderJsonSchemaAndRegexIsTheSame) {
  LOAD_OR_SKIP(engine, DType::Q8_0, true);
  grammar::GrammarCache cache(grammar_vocabulary(*engine->tokenizer(), engine->vocab_size()));
  uint64_t accepted = 0;
  for (bool jump_forward : {false, true}) {
    GenerationRequest r = constrained(*engine, cache, kSchemaPrompt, grammar::Grammar::from_json_schema(kSchema), 60);
    r.constraint.jump_forward = jump_forward;
    Drafting d = with_and_without(*engine, r);
    EXPECT_EQ(d.spec.tokens, d.plain.tokens) << "json, jump-forward " << jump_forward;
    EXPECT_EQ(d.spec.text, d.plain.text);
    EXPECT_EQ(d.spec.finish, d.plain.finish);
    accepted += d.accepted;
  }
  Drafting d =
      with_and_without(*engine, constrained(*engine, cache, kRegexPrompt, grammar::Grammar::from_regex(kRegex), 40));
  EXPECT_EQ(d.spec.tokens, d.plain.tokens) << "regex";
  EXPECT_TRUE(std::regex_match(d.spec.text, std::regex(kRegex))) << d.spec.text;
  accepted += d.accepted;
  EXPECT_GT(accepted, 10u) << "drafts proposed under the grammar must have been kept";
}

TEST(EngineDraftGrammar, SampledSeededRequestsUnderAGrammarAreReproducibleAndGrammatical) {
  // Sampled: the draft draws from its masked distribution q and hands that q
  // to the rejection rule. The same seed gives the same tokens, in the
  // grammar, with drafts kept.
  LOAD_OR_SKIP(engine, DType::Q8_0, true);
  grammar::GrammarCache cache(grammar_vocabulary(*engine->tokenizer(), engine->vocab_size()));
  GenerationRequest r = constrained(*engine, cache, kRegexPrompt, grammar::Grammar::from_regex(kRegex), 40);
  r.sampling = {.temperature = 0.8f, .top_p = 0.95f, .seed = 7};
  const uint64_t before = engine->stats().spec_accepted_tokens;
  const Output first = collect(*engine->submit(r));
  EXPECT_EQ(collect(*engine->submit(r)).tokens, first.tokens);
  EXPECT_TRUE(std::regex_match(first.text, std::regex(kRegex))) << first.text;
  EXPECT_GT(engine->stats().spec_accepted_tokens, before);
}

// The default model with `token`'s logit raised far above the rest in every
// row: a draft that, proposing blind, always guesses `token` first.
class Pushing final : public ModelRunner {
 public:
  Pushing(std::unique_ptr<ModelRunner> inner, int32_t token) : inner_(std::move(inner)), token_(token) {}
  int32_t vocab_size() const override { return inner_->vocab_size(); }
  int32_t context_length() const override { return inner_->context_length(); }
  int32_t kv_block_size() const override { return inner_->kv_block_size(); }
  int32_t kv_block_count() const override { return inner_->kv_block_count(); }
  void forward(const model::ForwardBatch& batch, Tensor& logits) override {
    inner_->forward(batch, logits);
    for (int64_t row = 0; row < logits.dim(0); ++row) logits.row_as<float>(row)[token_] += 100.0f;
  }

 private:
  std::unique_ptr<ModelRunner> inner_;
  int32_t token_;
};

TEST(EngineDraftGrammar, ADraftThatGuessesAForbiddenTokenFirstHasItsMaskedDraftsKept) {
  // The draft is the target's weights with "!" pushed to the top of every
  // row. "!" is not in the regex: proposing blind, every first guess is "!"
  // and every draft is cut; masked, "!" is out and the draft's argmax is the
  // target's, so every step proposes K = 4 drafts (or what is left of the
  // grammar) and every one is kept.
  const std::string path = default_model();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "skipped: default model not found at " << path;
  std::shared_ptr<model::Model> target = model::Model::load(path, {.max_context = 1024});
  std::shared_ptr<model::Model> draft = model::Model::load(path, {.max_context = 1024});
  std::shared_ptr<const tokenizer::Tokenizer> tok = load_model_tokenizer(*target);
  const std::vector<int32_t> bang = tok->encode("!", {});
  ASSERT_EQ(bang.size(), 1u);
  const KvSizing kv{.block_size = 16, .n_blocks = 128, .max_context = 1024};
  auto run = [&](bool grammar_drafts) {
    SchedulerOptions options;
    options.speculative_tokens = 4;
    options.speculative_adaptive = false;
    options.speculative_grammar_drafts = grammar_drafts;
    Engine engine(
        make_model_runner(target, kv), make_text_codec(tok), options,
        std::make_unique<DraftModelProposer>(std::make_unique<Pushing>(make_model_runner(draft, kv), bang[0]), 1.0));
    grammar::GrammarCache cache(grammar_vocabulary(*tok, engine.vocab_size()));
    Drafting d =
        with_and_without(engine, constrained(engine, cache, kRegexPrompt, grammar::Grammar::from_regex(kRegex), 40));
    engine.shutdown();
    return d;
  };
  const Drafting masked = run(true), blind = run(false);
  EXPECT_EQ(masked.spec.tokens, masked.plain.tokens);
  EXPECT_EQ(blind.spec.tokens, masked.plain.tokens);
  const uint64_t generated = masked.spec.tokens.size();
  ASSERT_GT(generated, 10u);
  EXPECT_EQ(blind.drafts, 0u) << "blind, every draft starts with the forbidden '!' and is cut";
  EXPECT_EQ(masked.accepted, masked.drafts) << "a masked draft from the target's weights is the target's token";
  // Each verify step yields its kept drafts + 1 token: with 4 drafts a
  // step, at least 3 of every 5 tokens come from drafts.
  EXPECT_GE(5 * masked.accepted, 3 * generated) << masked.accepted << " drafts kept of " << generated << " tokens";
}

TEST(EngineDraftGrammar, PromptLookupPassesOverMatchesTheGrammarForbids) {
  const std::string path = default_model();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "skipped: default model not found at " << path;
  std::unique_ptr<Engine> engine = Engine::load({.model_path = path, .kv = {.max_context = 256}});
  const tokenizer::Tokenizer& tok = *engine->tokenizer();
  auto id = [&](const char* text) {
    std::vector<int32_t> ids = tok.encode(text, {});
    EXPECT_EQ(ids.size(), 1u) << text;
    return ids.at(0);
  };
  const int32_t x = id("x"), a = id("a"), b = id("b"), one = id("1"), two = id("2");
  grammar::GrammarCache cache(grammar_vocabulary(tok, engine->vocab_size()));
  GrammarConstraint g{.compiled = cache.get(grammar::Grammar::from_regex("[0-9]+"))};
  SequenceConstraint constraint(g);
  // "x" last: its most recent earlier occurrence is followed by "a b", an
  // older one by "1 2 x".
  const std::vector<int32_t> tokens = {x, one, two, x, a, b, x};
  PromptLookupProposer lookup(1, 1);
  EXPECT_EQ(lookup.lookup(tokens, 3), (std::vector<int32_t>{a, b, x}));
  EXPECT_EQ(lookup.lookup(tokens, 3, &constraint), (std::vector<int32_t>{one, two}))
      << "the older match, cut before the 'x' the grammar forbids";
  // Nothing allowed anywhere: no draft. And the matcher is where it was.
  const std::vector<int32_t> letters = {x, a, b, x};
  EXPECT_TRUE(lookup.lookup(letters, 3, &constraint).empty());
  EXPECT_EQ(constraint.allowed_prefix(std::vector<int32_t>{one, two, one}), 3);
  EXPECT_EQ(constraint.allowed_prefix(std::vector<int32_t>{a}), 0);
}

TEST(EngineDraftGrammar, AGrammarWalkLeavesTheMatcherWhereItWas) {
  const std::string path = default_model();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "skipped: default model not found at " << path;
  std::unique_ptr<Engine> engine = Engine::load({.model_path = path, .kv = {.max_context = 256}});
  const tokenizer::Tokenizer& tok = *engine->tokenizer();
  const int32_t one = tok.encode("1", {}).at(0), a = tok.encode("a", {}).at(0);
  grammar::GrammarCache cache(grammar_vocabulary(tok, engine->vocab_size()));
  SequenceConstraint constraint(GrammarConstraint{.compiled = cache.get(grammar::Grammar::from_regex("[0-9]{2}a"))});
  {
    DraftGrammarWalk walk(&constraint);
    bool any = false;
    const uint32_t* mask = constraint.draft_mask(&any);
    ASSERT_TRUE(any && mask);
    EXPECT_TRUE(mask[one >> 5] >> (one & 31) & 1u);
    EXPECT_FALSE(mask[a >> 5] >> (a & 31) & 1u);
    EXPECT_TRUE(constraint.advance_draft(one));
    EXPECT_TRUE(constraint.advance_draft(one));
    mask = constraint.draft_mask(&any);
    EXPECT_TRUE(mask[a >> 5] >> (a & 31) & 1u) << "after two digits 'a' is allowed";
    EXPECT_FALSE(constraint.advance_draft(one)) << "a third digit is not";
    EXPECT_EQ(constraint.walked_drafts(), 2);
  }
  EXPECT_EQ(constraint.walked_drafts(), 0);
  EXPECT_EQ(constraint.allowed_prefix(std::vector<int32_t>{one, one, a}), 3) << "back at the start";
}

}  // namespace
}  // namespace brioche::engine
