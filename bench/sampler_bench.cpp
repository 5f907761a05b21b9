// Sampler cost per row of logits (engine/sampler.h) on SmolLM2's 49,152-token
// vocabulary: what each sequence of a decode step pays on the CPU after the
// forward. Logits are N(0, 3) (a flat-ish row, so top-k/top-p have work to do).
//   build/cpu/bench/sampler_bench
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampler.h"

namespace {

using brioche::engine::Sampler;
using brioche::engine::SamplingParams;

constexpr int kVocab = 49152;

const std::vector<float>& logits_row() {
  static const std::vector<float> row = [] {
    std::mt19937 gen(1);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> r(kVocab);
    for (float& x : r) x = normal(gen);
    return r;
  }();
  return row;
}

void run(benchmark::State& state, SamplingParams params) {
  Sampler sampler(std::move(params), kVocab);
  std::vector<float> row;
  for (auto _ : state) {
    row = logits_row();  // the sampler leaves processed logits in the row
    benchmark::DoNotOptimize(sampler.sample({.logits = row}).token);
  }
}

void BM_Greedy(benchmark::State& s) { run(s, {.temperature = 0.0f, .seed = 1}); }
void BM_Temperature(benchmark::State& s) { run(s, {.temperature = 0.7f, .seed = 1}); }
void BM_TopP(benchmark::State& s) { run(s, {.temperature = 0.7f, .top_p = 0.9f, .seed = 1}); }
void BM_TopK(benchmark::State& s) { run(s, {.temperature = 0.7f, .top_k = 40, .seed = 1}); }
void BM_TopKTopPMinP(benchmark::State& s) {
  run(s, {.temperature = 0.8f, .top_k = 50, .top_p = 0.95f, .min_p = 0.05f, .seed = 1});
}
void BM_Logprobs(benchmark::State& s) { run(s, {.temperature = 0.7f, .seed = 1, .logprobs = true, .top_logprobs = 5}); }

BENCHMARK(BM_Greedy)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Temperature)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopK)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopKTopPMinP)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Logprobs)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
