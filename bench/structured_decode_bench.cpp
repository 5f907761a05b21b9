// Constrained vs unconstrained decoding on the default model (SmolLM2-135M
// Q4_1), greedy, same prompt, one request at a time, plus the grammar's own
// per-token cost (mask fill + accept, replayed over the generated tokens),
// which is what the end-to-end difference should be made of.
//
//   ninja -C build/cpu bench/structured_decode_bench && ./build/cpu/bench/structured_decode_bench
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "engine/constraint.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace brioche;

constexpr int32_t kTokens = 64;
const char* kPrompt = "Here is a list of people with their names and ages, as JSON:";
// Cannot finish before kTokens (minItems): both sides decode the same count.
const char* kSchema = R"({"type":"array","minItems":40,"items":{"type":"object","properties":{
  "name":{"type":"string","maxLength":16},"age":{"type":"integer","minimum":0,"maximum":120}},
  "required":["name","age"],"additionalProperties":false}})";

struct Shared {
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<grammar::GrammarCache> cache;
};

Shared& shared() {
  static Shared s = [] {
    Shared out;
    const char* home = std::getenv("HOME");
    std::string path = std::getenv("BRIOCHE_MODEL")
                           ? std::getenv("BRIOCHE_MODEL")
                           : std::string(home ? home : "") + "/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path)) return out;
    out.engine = engine::Engine::load({.model_path = path, .kv = {.max_context = 512}});
    out.cache = std::make_unique<grammar::GrammarCache>(
        engine::grammar_vocabulary(*out.engine->tokenizer(), out.engine->vocab_size()));
    return out;
  }();
  return s;
}

engine::GenerationRequest request(bool constrained, bool any_whitespace, bool jump) {
  Shared& s = shared();
  engine::GenerationRequest r;
  r.prompt_tokens = s.engine->tokenize(kPrompt, {.add_bos = true});
  r.sampling.temperature = 0;
  r.max_tokens = kTokens;
  r.ignore_eos = true;
  if (constrained) {
    r.constraint.compiled =
        s.cache->get(grammar::Grammar::from_json_schema(std::string(kSchema), {.any_whitespace = any_whitespace}));
    r.constraint.jump_forward = jump;
  }
  return r;
}

// Decode tokens/s: wall time from the first generated token to the last.
void run_decode(benchmark::State& state, bool constrained, bool any_whitespace, bool jump) {
  Shared& s = shared();
  if (!s.engine) return state.SkipWithError("default model not found");
  double decode_seconds = 0;
  int64_t decoded = 0, generated = 0;
  const uint64_t steps_before = s.engine->stats().steps;
  for (auto _ : state) {
    using Clock = std::chrono::steady_clock;
    Clock::time_point first{}, last{};
    int32_t n = 0;
    s.engine->generate(request(constrained, any_whitespace, jump), [&](const engine::GenerationEvent& e) {
      if (e.tokens.empty()) return;
      last = Clock::now();
      if (n == 0) first = last;
      n += int32_t(e.tokens.size());
    });
    decode_seconds += std::chrono::duration<double>(last - first).count();
    decoded += n - 1;
    generated += n;
  }
  state.counters["decode_tok_per_s"] = double(decoded) / decode_seconds;
  // Forwards per generated token: below 1 when jump-forward prefilled forced chains.
  state.counters["steps_per_token"] = double(s.engine->stats().steps - steps_before) / double(generated);
}

void BM_DecodeUnconstrained(benchmark::State& state) { run_decode(state, false, true, false); }
void BM_DecodeJsonSchema(benchmark::State& state) { run_decode(state, true, true, false); }
void BM_DecodeJsonSchemaCompact(benchmark::State& state) { run_decode(state, true, false, false); }
void BM_DecodeJsonSchemaCompactJump(benchmark::State& state) { run_decode(state, true, false, true); }

// The grammar's share: next_mask + accept over the tokens a constrained run produced.
void BM_MaskAndAcceptPerToken(benchmark::State& state) {
  Shared& s = shared();
  if (!s.engine) return state.SkipWithError("default model not found");
  engine::GenerationRequest r = request(true, true, false);
  std::vector<int32_t> tokens;
  s.engine->generate(
      r, [&](const engine::GenerationEvent& e) { tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end()); });
  const auto& tok = *s.engine->tokenizer();
  int64_t steps = 0;
  for (auto _ : state) {
    engine::SequenceConstraint c(r.constraint);
    for (int32_t t : tokens) {
      bool any = false;
      benchmark::DoNotOptimize(c.next_mask(&any));
      c.accept(t, tok.token_bytes(t));
    }
    steps += int64_t(tokens.size());
  }
  state.counters["us_per_token"] =
      benchmark::Counter(double(steps), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK(BM_DecodeUnconstrained)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_DecodeJsonSchema)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_DecodeUnconstrained)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_DecodeJsonSchemaCompact)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_DecodeJsonSchemaCompactJump)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_MaskAndAcceptPerToken)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
