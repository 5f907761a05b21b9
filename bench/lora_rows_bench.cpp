// Unmerged LoRA on the CPU at the default model's shapes (SmolLM2-135M:
// hidden 576, kv 192, intermediate 1536, 30 layers): one decode step's
// low-rank terms for 16 rows spread 2 per adapter over 8 rank-8 adapters on
// all seven projections, each layer's factors distinct (39 MB of f16, as in
// `bench/lora_serving/cpu.sh`; the second argument 1: every layer reads
// layer 0's factors, 1.3 MB that stay in cache). BM_LoraStepPerProjection calls
// backend::cpu::lora_rows_add once per projection; BM_LoraStepSharedX once
// per x (Q/K/V, O, gate/up, down) through lora_rows_add_group, the path
// model/blocks.cpp takes, with f16 or Q8_0 factors (q8_0:1);
// BM_LoraStepBetweenWeights the same between reads of 80 MB (the base
// model's weights in a server step), so the factors come from DRAM;
// BM_LoraStepAfterBaseProjection after the real base projections (Q4_1
// column kernels), with and without their read-ahead of the factors. The
// kernels are the widest this CPU runs (AVX-512 where it has it).
//   build/<dir>/bench/lora_rows_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <vector>

#include "backend/cpu/lora_rows.h"
#include "backend/cpu/matmul.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/lora_rows.h"
#include "ops/quantize.h"

namespace {

using namespace brioche;
using backend::cpu::LoraRowsSegment;

constexpr int kLayers = 30, kAdapters = 8, kRank = 8, kRows = 16;
constexpr int64_t kHidden = 576, kKv = 192, kInter = 1536;
// Q, K, V, O, gate, up, down: (in, out).
constexpr int64_t kIn[7] = {kHidden, kHidden, kHidden, kHidden, kHidden, kHidden, kInter};
constexpr int64_t kOut[7] = {kHidden, kKv, kKv, kHidden, kInter, kInter, kHidden};

std::vector<uint16_t> random_f16(size_t n, uint32_t seed) {
  // Small normal values' bit patterns: sign, exponents 2^-8..2^-5, any mantissa.
  std::mt19937 rng(seed);
  std::vector<uint16_t> v(n);
  for (uint16_t& h : v) h = uint16_t((rng() & 0x83ff) | ((7 + rng() % 4) << 10));
  return v;
}

// The same factors in Q8_0 by block column (ops::lora_factor_q8_0, what the
// server holds for a quantized model on the CPU), adapter after adapter.
std::vector<uint8_t> to_q8_0(const std::vector<uint16_t>& f16, int64_t n) {
  std::vector<uint8_t> q;
  for (size_t g = 0; g < kAdapters; ++g) {
    Tensor f = Tensor::zeros(DType::F16, {kRank, n});
    std::copy_n(f16.data() + g * kRank * size_t(n), kRank * n, f.data_as<uint16_t>());
    const Tensor packed = ops::lora_factor_q8_0(f);
    q.insert(q.end(), packed.data_as<uint8_t>(), packed.data_as<uint8_t>() + packed.nbytes());
  }
  return q;
}

struct Step {
  std::vector<uint16_t> a[kLayers][7], bt[kLayers][7];  // all adapters of one (layer, projection)
  std::vector<uint8_t> a_q8[kLayers][7], bt_q8[kLayers][7];
  std::vector<float> x[7], y[7], u;
  Step() {
    uint32_t seed = 1;
    for (int l = 0; l < kLayers; ++l) {
      for (int p = 0; p < 7; ++p) {
        a[l][p] = random_f16(size_t(kAdapters) * kRank * kIn[p], seed++);
        bt[l][p] = random_f16(size_t(kAdapters) * kRank * kOut[p], seed++);
        a_q8[l][p] = to_q8_0(a[l][p], kIn[p]);
        bt_q8[l][p] = to_q8_0(bt[l][p], kOut[p]);
      }
    }
    for (int p = 0; p < 7; ++p) {
      x[p].assign(size_t(kRows) * kIn[p], 0.5f);
      y[p].assign(size_t(kRows) * kOut[p], 0.0f);
    }
    u.assign(size_t(kRows) * 3 * kRank, 0.0f);
  }
  std::vector<LoraRowsSegment> segments(int l, int p, bool q8 = false) const {
    std::vector<LoraRowsSegment> s;
    for (int g = 0; g < kAdapters; ++g) {
      if (q8) {
        s.push_back({.first_row = 2 * g,
                     .n_rows = 2,
                     .rank = kRank,
                     .a_q8 = a_q8[l][p].data() + size_t(g) * kRank * kIn[p] / 32 * 34,
                     .bt_q8 = bt_q8[l][p].data() + size_t(g) * kRank * kOut[p] / 32 * 34});
      } else {
        s.push_back({.first_row = 2 * g,
                     .n_rows = 2,
                     .rank = kRank,
                     .a = a[l][p].data() + size_t(g) * kRank * kIn[p],
                     .bt = bt[l][p].data() + size_t(g) * kRank * kOut[p]});
      }
    }
    return s;
  }
  backend::cpu::LoraRowsArgs args(int p, const std::vector<LoraRowsSegment>& s) {
    return {.x = x[p].data(),
            .y = y[p].data(),
            .u = u.data(),
            .in = kIn[p],
            .out = kOut[p],
            .ldx = kIn[p],
            .ldy = kOut[p],
            .ldu = 3 * kRank,
            .segments = s.data(),
            .n_segments = int32_t(s.size())};
  }
};

void BM_LoraStepPerProjection(benchmark::State& state) {
  ThreadPool::configure_global(int(state.range(0)));
  static Step step;
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l) {
      for (int p = 0; p < 7; ++p) {
        const auto s = step.segments(l % state.range(1), p);
        backend::cpu::lora_rows_add(step.args(p, s));
      }
    }
  }
  state.SetLabel("one decode step, 30 layers x 7 projections");
}
BENCHMARK(BM_LoraStepPerProjection)
    ->Args({2, kLayers})
    ->Args({1, kLayers})
    ->Args({1, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_LoraStepSharedX(benchmark::State& state) {
  ThreadPool::configure_global(int(state.range(0)));
  static Step step;
  // The projections that share an x, as model/blocks.cpp groups them.
  const std::vector<std::vector<int>> groups = {{0, 1, 2}, {3}, {4, 5}, {6}};
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l) {
      for (const auto& g : groups) {
        std::vector<std::vector<LoraRowsSegment>> segs;
        std::vector<backend::cpu::LoraRowsArgs> parts;
        for (int p : g) segs.push_back(step.segments(l % state.range(1), p, state.range(2) != 0));
        for (size_t i = 0; i < g.size(); ++i) {
          parts.push_back(step.args(g[i], segs[i]));
          parts.back().u = nullptr;  // as ops::lora_rows_add_group
        }
        backend::cpu::lora_rows_add_group(parts);
      }
    }
  }
  state.SetLabel("one decode step, 30 layers x 4 calls");
}
BENCHMARK(BM_LoraStepSharedX)
    ->ArgNames({"threads", "layers", "q8_0"})
    ->Args({2, kLayers, 0})
    ->Args({1, kLayers, 0})
    ->Args({1, 1, 0})
    ->Args({2, kLayers, 1})
    ->Args({1, kLayers, 1})
    ->Args({1, 1, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// As in the server: between two calls the base model's projections stream
// their weights (80 MB of Q4_1 a step, ~0.67 MB per call here), which
// evicts the factors from the last-level cache, so every step reads them
// from DRAM. The second argument 0: the weights' reads alone, no LoRA call
// (subtract it).
void BM_LoraStepBetweenWeights(benchmark::State& state) {
  ThreadPool::configure_global(int(state.range(0)));
  static Step step;
  static std::vector<uint64_t> weights(size_t(80) << 17, 1);  // 80 MB
  const std::vector<std::vector<int>> groups = {{0, 1, 2}, {3}, {4, 5}, {6}};
  const size_t slice = weights.size() / (kLayers * groups.size());
  uint64_t sum = 0;
  for (auto _ : state) {
    size_t w = 0;
    for (int l = 0; l < kLayers; ++l) {
      for (const auto& g : groups) {
        ThreadPool::global().parallel_for(int64_t(slice), 4096, [&](int64_t i0, int64_t i1) {
          uint64_t s = 0;
          for (int64_t i = i0; i < i1; i += 8) s += weights[w + size_t(i)];
          if (s == 42) sum += s;
        });
        w += slice;
        if (state.range(1) == 0) continue;
        std::vector<std::vector<LoraRowsSegment>> segs;
        std::vector<backend::cpu::LoraRowsArgs> parts;
        for (int p : g) segs.push_back(step.segments(l, p, state.range(2) != 0));
        for (size_t i = 0; i < g.size(); ++i) {
          parts.push_back(step.args(g[i], segs[i]));
          parts.back().u = nullptr;
        }
        backend::cpu::lora_rows_add_group(parts);
      }
    }
  }
  benchmark::DoNotOptimize(sum);
  state.SetLabel(state.range(1) ? "one decode step between 80 MB of weight reads" : "the weight reads alone");
}
BENCHMARK(BM_LoraStepBetweenWeights)
    ->ArgNames({"threads", "lora", "q8_0"})
    ->Args({2, 1, 0})
    ->Args({2, 1, 1})
    ->Args({2, 0, 0})
    ->Args({1, 1, 0})
    ->Args({1, 1, 1})
    ->Args({1, 0, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// A decode step of 16 rows as the server runs it on the CPU: the base
// projections (Q4_1 weights of the default model's shapes, 66 MB, through
// cpu::matmul_group's column kernels), each followed by the adapters' call
// on the same x (Q8_0 factors, 8 adapters, 2 rows each). read_ahead 1: the
// base projection gets the factors of the call after it (read_ahead.h), as
// model/blocks.cpp gives them. lora 0: the base alone. Compare the three in
// one run: --benchmark_repetitions=6 --benchmark_enable_random_interleaving.
struct BaseWeights {
  std::vector<uint8_t> w[kLayers][7];  // Q4_1 [out, in] per projection
  std::vector<float> x_in, x_inter, y[7];
  BaseWeights() {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> row(static_cast<size_t>(kInter));
    for (float& v : row) v = normal(rng);
    for (int l = 0; l < kLayers; ++l)
      for (int p = 0; p < 7; ++p) {
        const size_t row_bytes = size_t(kIn[p]) / 32 * 20;
        w[l][p].resize(row_bytes * size_t(kOut[p]));
        for (int64_t r = 0; r < kOut[p]; ++r)
          ops::quantize_row(DType::Q4_1, row.data(), &w[l][p][r * row_bytes], kIn[p]);
      }
    x_in.assign(size_t(kRows) * kHidden, 0.5f);
    x_inter.assign(size_t(kRows) * kInter, 0.5f);
    for (int p = 0; p < 7; ++p) y[p].assign(size_t(kRows) * kOut[p], 0.0f);
  }
  cpu::MatmulArgs args(int l, int p) {
    return {.x = kIn[p] == kHidden ? x_in.data() : x_inter.data(),
            .ldx = kIn[p],
            .wtype = DType::Q4_1,
            .w = w[l][p].data(),
            .w_row_bytes = size_t(kIn[p]) / 32 * 20,
            .y = y[p].data(),
            .ldy = kOut[p],
            .n = kRows,
            .m = kOut[p],
            .k = kIn[p]};
  }
};

void BM_LoraStepAfterBaseProjection(benchmark::State& state) {
  ThreadPool::configure_global(int(state.range(0)));
  static Step step;
  static BaseWeights base;
  const bool lora = state.range(1) != 0, read_ahead = state.range(2) != 0;
  const std::vector<std::vector<int>> groups = {{0, 1, 2}, {3}, {4, 5}, {6}};
  double base_s = 0, lora_s = 0;
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l) {
      for (const auto& g : groups) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<cpu::MatmulArgs> projections;
        std::vector<cpu::ByteRange> factors;
        for (int p : g) {
          projections.push_back(base.args(l, p));
          factors.push_back({.data = step.a_q8[l][p].data(), .bytes = step.a_q8[l][p].size()});
          factors.push_back({.data = step.bt_q8[l][p].data(), .bytes = step.bt_q8[l][p].size()});
        }
        cpu::matmul_group(projections,
                          read_ahead ? std::span<const cpu::ByteRange>(factors) : std::span<const cpu::ByteRange>{});
        const auto t1 = std::chrono::steady_clock::now();
        base_s += std::chrono::duration<double>(t1 - t0).count();
        if (!lora) continue;
        std::vector<std::vector<LoraRowsSegment>> segs;
        std::vector<backend::cpu::LoraRowsArgs> parts;
        for (int p : g) segs.push_back(step.segments(l, p, true));
        for (size_t i = 0; i < g.size(); ++i) {
          parts.push_back(step.args(g[i], segs[i]));
          parts.back().u = nullptr;
        }
        backend::cpu::lora_rows_add_group(parts);
        lora_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      }
    }
  }
  // Wall time of each half a step (the base projections, the adapters' calls).
  state.counters["base_us"] = benchmark::Counter(base_s * 1e6 / double(state.iterations()));
  state.counters["lora_us"] = benchmark::Counter(lora_s * 1e6 / double(state.iterations()));
  state.SetLabel(!lora ? "the base projections alone" : read_ahead ? "with adapters, read-ahead" : "with adapters");
}
BENCHMARK(BM_LoraStepAfterBaseProjection)
    ->ArgNames({"threads", "lora", "read_ahead"})
    ->Args({2, 0, 0})
    ->Args({2, 1, 0})
    ->Args({2, 1, 1})
    ->Args({1, 0, 0})
    ->Args({1, 1, 0})
    ->Args({1, 1, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
