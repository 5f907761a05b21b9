// The hybrid prefix cache through the engine on the CPU (a Qwen 3.5 model:
// BRIOCHE_QWEN35_MODEL, default the test fixture, run from the repository
// root; bench/qwen35_bench_model.py writes one at real linear-attention
// head sizes):
//   BM_Prefill/cache:{0,1}       a fresh 512-token prompt, one token out:
//                                what a snapshot at every block boundary
//                                (32 checkpoints inside the forward) costs;
//   BM_SharedSystem/cache:{0,1}  a 448-token system prompt then 64 new
//                                tokens: what reusing the system prompt saves.
//   build/<dir>/bench/hybrid_cache_bench
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "engine/engine.h"

namespace {

using namespace brioche;

std::string model_dir() {
  const char* dir = std::getenv("BRIOCHE_QWEN35_MODEL");
  return dir ? dir : "tests/fixtures/qwen35/dense";
}

std::unique_ptr<engine::Engine> load(bool prefix_cache) {
  return engine::Engine::load({.model_path = model_dir(),
                               .kv = {.max_context = 2048},
                               .scheduler = {.max_batch_tokens = 512, .prefix_cache = prefix_cache}});
}

// One request of `prompt`, a single greedy token; drains its events.
void ask(engine::Engine& e, std::vector<int32_t> prompt) {
  engine::GenerationRequest r;
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = 1;
  r.ignore_eos = true;
  auto handle = e.submit(std::move(r));
  while (handle->next()) {
  }
}

// `n` tokens starting at `seed`, distinct across seeds (a 509-token cycle).
std::vector<int32_t> tokens(int32_t n, int32_t seed) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < n; ++i) out.push_back(3 + (seed * 131 + i * 7) % 509);
  return out;
}

void BM_Prefill(benchmark::State& state) {
  auto e = load(state.range(0) != 0);
  int32_t seed = 1;
  for (auto _ : state) ask(*e, tokens(512, seed++));
}
BENCHMARK(BM_Prefill)->ArgName("cache")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SharedSystem(benchmark::State& state) {
  auto e = load(state.range(0) != 0);
  const std::vector<int32_t> system = tokens(448, 0);
  ask(*e, system);
  int32_t seed = 1;
  for (auto _ : state) {
    std::vector<int32_t> prompt = system;
    for (int32_t t : tokens(64, seed++)) prompt.push_back(t);
    ask(*e, prompt);
  }
}
BENCHMARK(BM_SharedSystem)->ArgName("cache")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
