// Grammar-constrained decoding through the engine on the default model
// (SmolLM2-135M Q4_1, CPU): output matches its grammar, a complete grammar
// finishes with "stop", max_tokens mid-JSON with "length", rows with
// different grammars share a batch without their masks mixing, preemption
// keeps the matcher in step, jump-forward gives the tokens of an unjumped run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/constraint.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace brioche::engine {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string default_model() {
  if (const char* env = std::getenv("BRIOCHE_MODEL")) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

struct Fixture {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<grammar::GrammarCache> cache;
};

Fixture load_or_skip(EngineOptions options) {
  options.model_path = default_model();
  Fixture f;
  if (!std::filesystem::exists(options.model_path)) return f;
  f.engine = Engine::load(options);
  f.cache = std::make_unique<grammar::GrammarCache>(grammar_vocabulary(*f.engine->tokenizer(), f.engine->vocab_size()));
  return f;
}

struct Output {
  std::string text;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::Error;
  int32_t completion_tokens = 0;
};

Output collect(RequestHandle& handle) {
  Output out;
  while (std::optional<GenerationEvent> e = handle.next()) {
    EXPECT_NE(e->finish, FinishReason::Error) << e->error;
    out.text += e->text;
    out.tokens.insert(out.tokens.end(), e->tokens.begin(), e->tokens.end());
    if (e->finish) out.finish = *e->finish;
    if (e->done) out.completion_tokens = e->usage.completion_tokens;
  }
  return out;
}

GenerationRequest constrained(Fixture& f, const std::string& prompt, const grammar::Grammar& g, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt_tokens = f.engine->tokenize(prompt, {.add_bos = true});
  r.sampling.temperature = 0;  // greedy: reproducible
  r.max_tokens = max_tokens;
  r.constraint.compiled = f.cache->get(g);
  return r;
}

const char* kPersonSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":10},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "student":{"type":"boolean"}},
  "required":["name","age","student"],"additionalProperties":false})";

const char* kCitySchema = R"({"type":"object","properties":{
  "city":{"type":"string","enum":["Paris","Lyon","Nice"]},
  "population":{"type":"integer","minimum":0,"maximum":9999999}},
  "required":["city","population"],"additionalProperties":false})";

grammar::Grammar compact_schema(const char* text) {
  return grammar::Grammar::from_json_schema(std::string(text), {.any_whitespace = false});
}

void expect_person(const std::string& text) {
  json v = json::parse(text, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << "not JSON: " << text;
  ASSERT_TRUE(v.is_object()) << text;
  EXPECT_EQ(v.size(), 3u) << text;
  ASSERT_TRUE(v["name"].is_string()) << text;
  EXPECT_LE(v["name"].get<std::string>().size(), 10u) << text;
  ASSERT_TRUE(v["age"].is_number_integer()) << text;
  EXPECT_GE(v["age"].get<int64_t>(), 0) << text;
  EXPECT_LE(v["age"].get<int64_t>(), 120) << text;
  EXPECT_TRUE(v["student"].is_boolean()) << text;
}

void expect_city(const std::string& text) {
  json v = json::parse(text, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << "not JSON: " << text;
  ASSERT_TRUE(v.is_object()) << text;
  EXPECT_EQ(v.size(), 2u) << text;
  ASSERT_TRUE(v["city"].is_string()) << text;
  std::string city = v["city"];
  EXPECT_TRUE(city == "Paris" || city == "Lyon" || city == "Nice") << text;
  EXPECT_TRUE(v["population"].is_number_integer()) << text;
}

TEST(EngineGrammar, SchemaOutputParsesValidatesAndStopsWhenComplete) {
  Fixture f = load_or_skip({.kv = {.max_context = 512}});
  if (!f.engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  Output out =
      collect(*f.engine->submit(constrained(f, "A student described as JSON:", compact_schema(kPersonSchema), 64)));
  expect_person(out.text);
  // The grammar terminated at the closing brace: "stop", nothing sampled after it.
  EXPECT_EQ(out.finish, FinishReason::Stop);
  EXPECT_EQ(out.text.back(), '}');
  EXPECT_EQ(out.completion_tokens, int32_t(out.tokens.size()));
  EXPECT_EQ(f.engine->tokenizer()->decode(out.tokens), out.text);
}

TEST(EngineGrammar, ChoiceTerminatesWithStop) {
  Fixture f = load_or_skip({.kv = {.max_context = 512}});
  if (!f.engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  auto g = grammar::Grammar::from_choices({"positive", "negative", "neutral\n\"quoted\""});
  Output out = collect(*f.engine->submit(constrained(f, "Review: I loved this film. Sentiment:", g, 32)));
  EXPECT_EQ(out.finish, FinishReason::Stop);
  EXPECT_TRUE(out.text == "positive" || out.text == "negative" || out.text == "neutral\n\"quoted\"") << out.text;
  EXPECT_LT(out.tokens.size(), 8u);
}

TEST(EngineGrammar, RegexOutputMatches) {
  Fixture f = load_or_skip({.kv = {.max_context = 512}});
  if (!f.engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  auto g = grammar::Grammar::from_regex(R"(\d{3}-[A-Z]{2}(-\d)?)");
  Output out = collect(*f.engine->submit(constrained(f, "Part number:", g, 16)));
  EXPECT_EQ(out.finish, FinishReason::Stop);
  EXPECT_TRUE(std::regex_match(out.text, std::regex(R"(\d{3}-[A-Z]{2}(-\d)?)"))) << out.text;
}

TEST(EngineGrammar, MaxTokensMidJsonEndsWithLengthOnTheSampledToken) {
  Fixture f = load_or_skip({.kv = {.max_context = 512}});
  if (!f.engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  auto g = compact_schema(kPersonSchema);
  Output full = collect(*f.engine->submit(constrained(f, "A student described as JSON:", g, 64)));
  ASSERT_GT(full.tokens.size(), 6u);
  for (int32_t max_tokens : {1, 5}) {
    Output cut = collect(*f.engine->submit(constrained(f, "A student described as JSON:", g, max_tokens)));
    EXPECT_EQ(cut.finish, FinishReason::Length) << max_tokens;
    ASSERT_EQ(cut.tokens.size(), size_t(max_tokens));
    // Greedy: the truncated run is the full run's prefix, ending on a real sampled token.
    EXPECT_EQ(cut.tokens, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + max_tokens));
    EXPECT_EQ(cut.text, f.engine->tokenizer()->decode(cut.tokens));
    EXPECT_EQ(full.text.rfind(cut.text, 0), 0u) << cut.text;
  }
}

TEST(EngineGrammar, BatchRowsWithDifferentGrammarsDoNotMix) {
  Fixture f = load_or_skip({.kv = {.max_context = 512}});
  if (!f.engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  struct Row {
    std::string prompt;
    grammar::Grammar g;
    int kind;  // 0 person, 1 city, 2 choice, 3 free
  };
  std::vector<Row> rows = {
      {"A student described as JSON:", compact_schema(kPersonSchema), 0},
      {"A French city as JSON:", compact_schema(kCitySchema), 1},
      {"Is the sky blue? Answer:", grammar::Grammar::from_choices({"yes", "no"}), 2},
      {"A French city and its population as JSON:", compact_schema(kCitySchema), 1},
      {"Another student as JSON:", grammar::Grammar::from_json_schema(std::string(kPersonSchema)), 0},
  };
  // Alone first (reference), then all at once plus an unconstrained row.
  std::vector<Output> alone;
  for (Row& r : rows) alone.push_back(collect(*f.engine->submit(constrained(f, r.prompt, r.g, 64))));
  GenerationRequest free_req;
  free_req.prompt_tokens = f.engine->tokenize("The capital of France is", {.add_bos = true});
  free_req.sampling.temperature = 0;
  free_req.max_tokens = 12;
  free_req.ignore_eos = true;
  Output free_alone = collect(*f.engine->submit(free_req));

  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (Row& r : rows) handles.push_back(f.engine->submit(constrained(f, r.prompt, r.g, 64)));
  auto free_handle = f.engine->submit(free_req);
  for (size_t i = 0; i < rows.size(); ++i) {
    Output out = collect(*handles[i]);
    if (rows[i].kind == 0) expect_person(out.text);
    if (rows[i].kind == 1) expect_city(out.text);
    if (rows[i].kind == 2) {
      EXPECT_TRUE(out.text == "yes" || out.text == "no") << out.text;
    }
    EXPECT_EQ(out.finish, FinishReason::Stop) << i;
    // Row-independent forward + own matcher: batched tokens equal the lone run's.
    EXPECT_EQ(out.tokens, alone[i].tokens) << "row " << i << ": " << out.text << " vs " << alone[i].text;
  }
  Output free_out = collect(*free_handle);
  EXPECT_EQ(free_out.tokens, free_alone.tokens);  // no mask bled into the free row
}

TEST(EngineGrammar, PreemptedSequencesResumeWithTheirMatcher) {
  // 5 KV blocks of 16 positions: four ~8-token prompts growing to ~30 tokens
  // cannot all stay resident, so the newest are preempted and recomputed.
  Fixture f = load_or_skip({.kv = {.block_size = 16, .n_blocks = 5, .max_context = 64}});
  if (!f.engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  auto g = compact_schema(kPersonSchema);
  const char* prompts[] = {
      "A student described as JSON:", "Another student as JSON:", "JSON for a pupil:", "Student record in JSON:"};
  std::vector<Output> alone;
  for (const char* p : prompts) alone.push_back(collect(*f.engine->submit(constrained(f, p, g, 48))));
  uint64_t before = f.engine->stats().preemptions;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const char* p : prompts) handles.push_back(f.engine->submit(constrained(f, p, g, 48)));
  for (size_t i = 0; i < handles.size(); ++i) {
    Output out = collect(*handles[i]);
    expect_person(out.text);
    EXPECT_EQ(out.tokens, alone[i].tokens) << i;
  }
  EXPECT_GT(f.engine->stats().preemptions, before);
}

const char* kOrderSchema = R"({"type":"object","properties":{
  "order_id":{"type":"string","format":"uuid"},
  "status":{"enum":["pending_review","shipped_internationally","cancelled_by_customer"]},
  "created":{"type":"string","format":"date"},
  "items":{"type":"array","minItems":1,"maxItems":2,"items":{"type":"object","properties":{
    "sku":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},
    "quantity":{"type":"integer","minimum":1,"maximum":9}},
    "required":["sku","quantity"],"additionalProperties":false}}},
  "required":["order_id","status","created","items"],"additionalProperties":false})";

const char* kToolCallSchema = R"({"type":"object","properties":{
  "name":{"const":"get_weather_forecast"},
  "arguments":{"type":"object","properties":{
    "location":{"type":"string","maxLength":24},
    "unit":{"enum":["celsius","fahrenheit"]}},
    "required":["location","unit"],"additionalProperties":false}},
  "required":["name","arguments"],"additionalProperties":false})";

// Jump-forward appends only tokens that are the sole allowed token at their
// step, so the tokens (and the text) equal an unjumped run's, greedy or
// seeded, while the chains go through one prefill forward instead of one
// decode step each.
TEST(EngineGrammar, JumpForwardGivesTheTokensOfAnUnjumpedRunInFewerSteps) {
  Fixture f = load_or_skip({.kv = {.max_context = 512}});
  if (!f.engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  struct Case {
    const char* prompt;
    grammar::Grammar g;
    float temperature;
  };
  std::vector<Case> cases = {
      {"A French city as JSON:", compact_schema(kCitySchema), 0.0f},
      {"A student described as JSON:", compact_schema(kPersonSchema), 0.0f},
      {"A student described as JSON:", grammar::Grammar::from_json_schema(std::string(kPersonSchema)), 0.0f},
      {"An order as JSON:", compact_schema(kOrderSchema), 0.0f},
      {"Call the weather tool for Paris:", compact_schema(kToolCallSchema), 0.0f},
      {"Call the weather tool for Oslo:", grammar::Grammar::from_json_schema(std::string(kToolCallSchema)), 0.0f},
      {"Status:", grammar::Grammar::from_choices({"pending_review", "shipped_internationally"}), 0.0f},
      {"Part number:", grammar::Grammar::from_regex(R"(PN-\d{4}-XYZQ)"), 0.0f},
      // Seeded sampling: a skipped step still advances the sampler's random state.
      {"An order as JSON:", compact_schema(kOrderSchema), 0.8f},
      {"Call the weather tool for Rome:", compact_schema(kToolCallSchema), 1.0f},
  };
  // The engine thread publishes its stats after the step that delivered a
  // request's last event, so a reader that has just collected the output may
  // see the step count before that step: wait for the finished count first.
  auto steps_after_finishing = [&](uint64_t finished) {
    for (int spin = 0; spin < 2000 && f.engine->stats().requests_finished < finished; ++spin)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return f.engine->stats().steps;
  };
  uint64_t steps_plain = 0, steps_jump = 0;
  for (Case& c : cases) {
    GenerationRequest plain = constrained(f, c.prompt, c.g, 160);
    plain.sampling.temperature = c.temperature;
    plain.sampling.seed = 1234;
    GenerationRequest jump = plain;
    jump.constraint.jump_forward = true;
    const uint64_t finished = f.engine->stats().requests_finished;
    uint64_t s0 = steps_after_finishing(finished);
    Output a = collect(*f.engine->submit(plain));
    uint64_t s1 = steps_after_finishing(finished + 1);
    Output b = collect(*f.engine->submit(jump));
    uint64_t s2 = steps_after_finishing(finished + 2);
    EXPECT_EQ(b.tokens, a.tokens) << c.prompt << "\n  plain: " << a.text << "\n  jump:  " << b.text;
    EXPECT_EQ(b.text, a.text);
    EXPECT_EQ(b.finish, a.finish) << c.prompt;
    EXPECT_EQ(b.finish, FinishReason::Stop) << c.prompt << ": " << a.text;
    EXPECT_LE(s2 - s1, s1 - s0) << c.prompt;
    steps_plain += s1 - s0;
    steps_jump += s2 - s1;
  }
  // The chains (e.g. the rest of an enum value once it is unique) went
  // through prefill rows.
  EXPECT_LT(steps_jump, steps_plain);
  std::printf("jump-forward: %llu steps vs %llu unjumped over %zu cases\n", (unsigned long long)steps_jump,
              (unsigned long long)steps_plain, cases.size());
}

TEST(EngineGrammar, ReasoningBlockIsFreeAndTheAnswerConstrained) {
  Fixture f = load_or_skip({.kv = {.max_context = 512}});
  if (!f.engine) GTEST_SKIP() << "skipped: default model not found at " << default_model();
  // The prompt leaves a block open; the model writes freely until the close
  // tag, then the grammar applies. SmolLM2 has no </think>, so a newline
  // stands in for the close tag.
  auto g = grammar::Grammar::from_choices({"yes", "no"});
  GenerationRequest r = constrained(f, "Question: is fire hot? <think>", g, 40);
  r.constraint.starts_in_reasoning = true;
  r.constraint.reasoning_close = "\n";  // a close tag this model emits quickly
  Output out = collect(*f.engine->submit(r));
  size_t close = out.text.find('\n');
  ASSERT_NE(close, std::string::npos) << out.text;
  std::string answer = out.text.substr(out.text.find_first_not_of('\n', close));
  EXPECT_TRUE(answer == "yes" || answer == "no") << out.text;
  EXPECT_EQ(out.finish, FinishReason::Stop);
}

}  // namespace
}  // namespace brioche::engine
