// CPU decode attention of one engine step, as the server runs it: 16
// sequences each decode one row against `context` cached positions, over the
// 30 layers of SmolLM2-135M (9 query heads, 3 KV heads, head_dim 64), with
// each sequence's blocks scattered over a cache of the server's default size
// (256 MiB). The time is per step (all layers); f16 and f32 caches.
//   build/cpu/bench/attention_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "ops/attention.h"

namespace {

using namespace brioche;

constexpr int kLayers = 30, kHeads = 9, kKvHeads = 3, kHeadDim = 64, kBlock = 16, kSequences = 16;

void BM_DecodeStep(benchmark::State& state, DType dtype) {
  const int context = int(state.range(0));
  const size_t block_bytes = size_t(2) * kLayers * kBlock * kKvHeads * kHeadDim * dtype_info(dtype).block_bytes;
  const int n_blocks = int((size_t(256) << 20) / block_bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<Tensor> keys, values;
  for (int l = 0; l < kLayers; ++l) {
    keys.push_back(Tensor::zeros(dtype, {n_blocks, kBlock, kKvHeads, kHeadDim}));
    values.push_back(Tensor::zeros(dtype, {n_blocks, kBlock, kKvHeads, kHeadDim}));
  }
  // Block tables: a random draw of the cache's blocks, as after many requests.
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int per_sequence = (context + kBlock - 1) / kBlock;
  std::vector<std::vector<int32_t>> tables;
  std::vector<ops::AttentionSequence> sequences;
  for (int s = 0; s < kSequences; ++s) {
    tables.emplace_back(ids.begin() + s * per_sequence, ids.begin() + (s + 1) * per_sequence);
    sequences.push_back({s, 1, context - 1, tables.back()});
  }
  Tensor q = Tensor::zeros(DType::F32, {kSequences, kHeads * kHeadDim});
  for (int64_t i = 0; i < q.numel(); ++i) q.data_as<float>()[i] = normal(rng);
  Tensor out = Tensor::zeros(DType::F32, {kSequences, kHeads * kHeadDim});
  const ops::AttentionParams params{.n_heads = kHeads, .n_kv_heads = kKvHeads, .head_dim = kHeadDim, .scale = 0.125f};
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l)
      ops::paged_attention(q, {.k = keys[size_t(l)], .v = values[size_t(l)], .sequences = sequences}, params, out);
    benchmark::DoNotOptimize(out.data_as<float>());
  }
  state.counters["keys/s"] = benchmark::Counter(double(kLayers) * kSequences * context * double(state.iterations()),
                                                benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_DecodeStep, f16, DType::F16)->Arg(64)->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_DecodeStep, f32, DType::F32)->Arg(64)->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
