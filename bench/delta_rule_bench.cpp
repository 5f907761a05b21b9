// CPU Gated DeltaNet kernels at a real Qwen 3.5 linear-attention shape (16
// key heads, 32 value heads, head dims 128, conv kernel 4; one layer): the
// gated delta rule over a prefill of `rows` rows of one sequence by chunk
// size (1 = the recurrent form for every row), a decode step of 16
// sequences, and the causal conv1d. The chunk size of ops::kDeltaRuleChunk
// was chosen from BM_DeltaRulePrefill.
//   build/<dir>/bench/delta_rule_bench
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backend/cpu/causal_conv1d.h"
#include "backend/cpu/gated_delta_rule.h"

namespace {

using namespace brioche;

constexpr int kKHeads = 16, kVHeads = 32, kDim = 128, kKernel = 4;
constexpr int kChannels = 2 * kKHeads * kDim + kVHeads * kDim;

std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// rows × (q, k, v, g, β) for n_seqs sequences of `rows` rows each.
struct Inputs {
  int64_t n;
  std::vector<float> qkv, g, beta, state, out;
  Inputs(int n_seqs, int rows)
      : n(int64_t(n_seqs) * rows),
        qkv(random_floats(size_t(n) * kChannels, -1, 1, 1)),
        g(random_floats(size_t(n) * kVHeads, -0.5f, -0.01f, 2)),
        beta(random_floats(size_t(n) * kVHeads, 0, 1, 3)),
        state(size_t(n_seqs) * kVHeads * kDim * kDim, 0.0f),
        out(size_t(n) * kVHeads * kDim) {}
  backend::cpu::GatedDeltaRuleArgs args(std::span<const ops::RecurrentSequence> seqs, int chunk) {
    const int64_t kw = kKHeads * kDim;
    return {.q = qkv.data(),
            .k = qkv.data() + kw,
            .v = qkv.data() + 2 * kw,
            .g = g.data(),
            .beta = beta.data(),
            .state = state.data(),
            .out = out.data(),
            .q_stride = kChannels,
            .k_stride = kChannels,
            .v_stride = kChannels,
            .g_stride = kVHeads,
            .beta_stride = kVHeads,
            .out_stride = kVHeads * kDim,
            .n_k_heads = kKHeads,
            .n_v_heads = kVHeads,
            .key_dim = kDim,
            .value_dim = kDim,
            .sequences = seqs,
            .chunk_size = chunk};
  }
};

void BM_DeltaRulePrefill(benchmark::State& state) {
  const int rows = int(state.range(0)), chunk = int(state.range(1));
  Inputs in(1, rows);
  const ops::RecurrentSequence seq{.first_row = 0, .n_rows = rows, .state_slot = 0, .starts = true};
  for (auto _ : state) backend::cpu::gated_delta_rule(in.args({&seq, 1}, chunk));
  state.counters["rows/s"] = benchmark::Counter(double(rows) * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DeltaRulePrefill)
    ->ArgsProduct({{512}, {1, 8, 16, 32, 64, 128}})
    ->ArgNames({"rows", "chunk"})
    ->Unit(benchmark::kMillisecond);

void BM_DeltaRuleDecode(benchmark::State& state) {
  constexpr int kSeqs = 16;
  Inputs in(kSeqs, 1);
  std::vector<ops::RecurrentSequence> seqs;
  for (int s = 0; s < kSeqs; ++s) seqs.push_back({.first_row = s, .n_rows = 1, .state_slot = s, .first_position = 9});
  for (auto _ : state) backend::cpu::gated_delta_rule(in.args(seqs, ops::kDeltaRuleChunk));
  state.counters["rows/s"] =
      benchmark::Counter(double(kSeqs) * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DeltaRuleDecode)->Unit(benchmark::kMicrosecond);

void BM_CausalConv1d(benchmark::State& state) {
  const int rows = int(state.range(0));
  std::vector<float> x = random_floats(size_t(rows) * kChannels, -1, 1, 4),
                     w = random_floats(kChannels * kKernel, -1, 1, 5);
  std::vector<float> conv_state(size_t(kKernel - 1) * kChannels, 0.0f), out(size_t(rows) * kChannels);
  const ops::RecurrentSequence seq{.first_row = 0, .n_rows = rows, .state_slot = 0, .starts = false};
  for (auto _ : state)
    backend::cpu::causal_conv1d_silu({.x = x.data(),
                                      .weight = w.data(),
                                      .state = conv_state.data(),
                                      .out = out.data(),
                                      .x_stride = kChannels,
                                      .out_stride = kChannels,
                                      .channels = kChannels,
                                      .kernel = kKernel,
                                      .sequences = {&seq, 1}});
  state.counters["rows/s"] = benchmark::Counter(double(rows) * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CausalConv1d)->Arg(1)->Arg(512)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
