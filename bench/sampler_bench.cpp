// Sampler cost per row of logits (engine/sampler.h) on SmolLM2's 49,152-token
// vocabulary: what each sequence of a decode step pays on the CPU after the
// forward. Logits are N(0, 3) (a flat-ish row, so top-k/top-p have work to do).
// BM_DeviceUpload: the host side of device sampling (engine/device_sampler.h)
// for a 64-row decode step with repetition and frequency penalties: the
// penalty entries of each row's prompt (argument 0, tokens) and output, each
// iteration one step later (one more output token per row), kept per
// sequence (argument 1 = 1) or rebuilt every step (0).
// BM_CudaSample: device sampling of a decode step (engine/device_sampler.h on
// CUDA logits, backend/cuda/sampling.cu), the whole call (upload, kernel,
// results back): argument 0 rows; argument 1 the settings (0: T 0.8, top-k
// 50, top-p 0.95; 1: T 0.8, top-p 0.95; 2: T 1; 3: as 0 with the 5 most
// likely tokens' logprobs); argument 2 the logits (0:
// N(0, 3), flat, so top-p keeps thousands of tokens; 1: peaked as a trained
// model's often are, logit = -2 ln(rank) over a random order of ranks, so
// top-p 0.95 keeps about a dozen); argument 3 the vocabulary (SmolLM2's
// 49,152 or Llama-3's 128,256). Skipped without a CUDA device.
//   build/cpu/bench/sampler_bench
//   build/cuda/bench/sampler_bench --benchmark_filter=CudaSample   (on the GPU machine)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "engine/device_sampler.h"
#include "engine/sampler.h"
#include "ops/device.h"

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

void BM_DeviceUpload(benchmark::State& state) {
  using brioche::engine::DeviceSampler;
  constexpr int kRows = 64, kOutput = 256, kMaxSteps = 1 << 16;
  const int prompt = int(state.range(0));
  const bool kept = state.range(1) != 0;
  std::mt19937 gen(2);
  std::vector<std::vector<int32_t>> tokens(kRows, std::vector<int32_t>(size_t(prompt + kOutput + kMaxSteps)));
  for (auto& row : tokens)
    for (int32_t& t : row) t = int32_t(gen() % kVocab);
  const SamplingParams params{
      .temperature = 0.8f, .top_p = 0.95f, .repetition_penalty = 1.1f, .frequency_penalty = 0.2f, .seed = 1};
  std::vector<Sampler> samplers(kRows, Sampler(params, kVocab));
  std::vector<DeviceSampler::PenaltyEntries> caches(kRows);
  DeviceSampler device(kVocab);
  std::vector<DeviceSampler::Row> rows(kRows);
  int step = 0;
  for (auto _ : state) {
    for (int r = 0; r < kRows; ++r) {
      const std::vector<int32_t>& t = tokens[size_t(r)];
      rows[size_t(r)] = {.sampler = &samplers[size_t(r)],
                         .logit_row = r,
                         .prompt = std::span<const int32_t>(t.data(), size_t(prompt)),
                         .output = std::span<const int32_t>(t.data() + prompt, size_t(kOutput + step % kMaxSteps)),
                         .penalties = kept ? &caches[size_t(r)] : nullptr};
    }
    benchmark::DoNotOptimize(device.prepare(rows).entries.size());
    ++step;
  }
}

void BM_CudaSample(benchmark::State& state) {
  using brioche::engine::DeviceSampler;
  if (!brioche::ops::cuda_available()) {
    state.SkipWithError("skipped: no CUDA device");
    return;
  }
  const int n_rows = int(state.range(0)), settings = int(state.range(1));
  const bool peaked = state.range(2) != 0;
  const int vocab = int(state.range(3));
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(size_t(n_rows) * vocab);
  std::vector<int> ranks(vocab);
  for (int r = 0; r < n_rows; ++r) {
    float* row = logits.data() + size_t(r) * vocab;
    if (!peaked) {
      for (int i = 0; i < vocab; ++i) row[i] = normal(gen);
      continue;
    }
    for (int i = 0; i < vocab; ++i) ranks[size_t(i)] = i + 1;
    std::shuffle(ranks.begin(), ranks.end(), gen);
    for (int i = 0; i < vocab; ++i) row[i] = -2.0f * std::log(float(ranks[size_t(i)]));
  }
  const brioche::Tensor device_logits = brioche::ops::to_device(
      brioche::Tensor::view(logits.data(), brioche::DType::F32, {n_rows, vocab}, nullptr), brioche::Device::CUDA);
  SamplingParams params{.temperature = 0.8f, .top_k = 50, .top_p = 0.95f, .seed = 1};
  if (settings == 1) params.top_k = 0;
  if (settings == 2) params = {.temperature = 1.0f, .seed = 1};
  if (settings == 3) {
    params.logprobs = true;
    params.top_logprobs = 5;
  }
  std::vector<Sampler> samplers(size_t(n_rows), Sampler(params, vocab));
  std::vector<DeviceSampler::Row> rows(static_cast<size_t>(n_rows));
  for (int r = 0; r < n_rows; ++r) rows[size_t(r)] = {.sampler = &samplers[size_t(r)], .logit_row = r};
  DeviceSampler device(vocab);
  for (auto _ : state) benchmark::DoNotOptimize(device.sample(device_logits, rows)[0].token);
}

BENCHMARK(BM_CudaSample)
    ->ArgsProduct({{1, 16, 64}, {0, 1, 2, 3}, {0, 1}, {kVocab, 128256}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DeviceUpload)
    ->Args({512, 0})
    ->Args({512, 1})
    ->Args({4096, 0})
    ->Args({4096, 1})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Greedy)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Temperature)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopK)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopKTopPMinP)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Logprobs)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
