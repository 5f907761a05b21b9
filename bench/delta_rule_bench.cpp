// CPU Gated DeltaNet kernels at a real Qwen 3.5 linear-attention shape (16
// key heads, 32 value heads, head dims 128, conv kernel 4; one layer): the
// gated delta rule over a prefill of `rows` rows of one sequence by chunk
// size (1 = the recurrent form for every row), a decode step of 16
// sequences, and the causal conv1d. The chunk size of ops::kDeltaRuleChunk
// was chosen from BM_DeltaRulePrefill. BM_DeltaRuleBackward: the training
// backward (Qwen 3.5 LoRA) over 2 sequences of 1,024 rows at 16 heads of
// 128 × 128, in the recurrent walk (chunk 1) and in chunks of 16 with AVX2
// products (avx2_only 1) or the widest the CPU runs.
//   build/<dir>/bench/delta_rule_bench [--benchmark_filter=Backward --benchmark_repetitions=3
//                                       --benchmark_enable_random_interleaving=true]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backend/cpu/causal_conv1d.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gated_delta_rule.h"
#include "backend/cpu/gated_delta_rule_backward.h"

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

void BM_DeltaRuleBackward(benchmark::State& state) {
  constexpr int kSeqs = 2, kRows = 1024, kHeads = 16, kWidth = kHeads * kDim, kQkv = 3 * kWidth;
  const int chunk = int(state.range(0));
  const int64_t n = int64_t(kSeqs) * kRows;
  std::vector<float> qkv = random_floats(size_t(n) * kQkv, -1, 1, 6),
                     g = random_floats(size_t(n) * kHeads, -0.5f, -0.01f, 7),
                     beta = random_floats(size_t(n) * kHeads, 0, 1, 8),
                     dout = random_floats(size_t(n) * kWidth, -1, 1, 9);
  std::vector<float> dqkv(size_t(n) * kQkv), dg(size_t(n) * kHeads), dbeta(size_t(n) * kHeads);
  std::vector<ops::RecurrentSequence> seqs;
  for (int s = 0; s < kSeqs; ++s)
    seqs.push_back({.first_row = s * kRows, .n_rows = kRows, .state_slot = s, .starts = true});
  const backend::cpu::GatedDeltaRuleBackwardArgs args{.q = qkv.data(),
                                                      .k = qkv.data() + kWidth,
                                                      .v = qkv.data() + 2 * kWidth,
                                                      .g = g.data(),
                                                      .beta = beta.data(),
                                                      .dout = dout.data(),
                                                      .dq = dqkv.data(),
                                                      .dk = dqkv.data() + kWidth,
                                                      .dv = dqkv.data() + 2 * kWidth,
                                                      .dg = dg.data(),
                                                      .dbeta = dbeta.data(),
                                                      .n_rows = n,
                                                      .q_stride = kQkv,
                                                      .k_stride = kQkv,
                                                      .v_stride = kQkv,
                                                      .g_stride = kHeads,
                                                      .beta_stride = kHeads,
                                                      .dout_stride = kWidth,
                                                      .dq_stride = kQkv,
                                                      .dk_stride = kQkv,
                                                      .dv_stride = kQkv,
                                                      .dg_stride = kHeads,
                                                      .dbeta_stride = kHeads,
                                                      .n_k_heads = kHeads,
                                                      .n_v_heads = kHeads,
                                                      .key_dim = kDim,
                                                      .value_dim = kDim,
                                                      .sequences = seqs,
                                                      .chunk_size = chunk};
  if (state.range(1) == 1) cpu::set_isa_override(cpu::Isa::Avx2);
  for (auto _ : state) backend::cpu::gated_delta_rule_backward(args);
  cpu::clear_isa_override();
  state.counters["rows/s"] = benchmark::Counter(double(n) * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DeltaRuleBackward)
    ->Args({1, 1})
    ->Args({16, 1})
    ->Args({16, 0})
    ->ArgNames({"chunk", "avx2_only"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

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
