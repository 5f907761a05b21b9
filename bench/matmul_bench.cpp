// Matmul throughput on the SmolLM2-135M shapes, per weight dtype, decode
// (n = 1), 16 sequences decoding together (n = 16) and prefill (n = 128).
// Counters: weight GB/s and GFLOP/s.
//   ./bench_matmul_bench --benchmark_filter=q4_1
// Set BRIOCHE_ISA=avx2|avx512|avx512_vnni|scalar to force a path and
// BRIOCHE_THREADS=n for the pool size (default: all hardware threads).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_ref.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace {

using namespace brioche;

struct Shape {
  const char* name;
  int64_t m, k;
};
constexpr Shape kShapes[] = {
    {"attn_576x576", 576, 576},
    {"ffn_up_1536x576", 1536, 576},
    {"ffn_down_576x1536", 576, 1536},
    {"vocab_49152x576", 49152, 576},
};
constexpr DType kTypes[] = {DType::Q4_1,        DType::Q8_0,        DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                            DType::AFFINE4_G64, DType::AFFINE8_G64, DType::F32,  DType::F16,  DType::BF16};

void apply_isa_env() {
  if (const char* threads = std::getenv("BRIOCHE_THREADS")) ThreadPool::configure_global(std::atoi(threads));
  const char* env = std::getenv("BRIOCHE_ISA");
  if (!env) return;
  for (cpu::Isa isa : cpu::available_isas())
    if (cpu::isa_name(isa) == env) cpu::set_isa_override(isa);
}

void bm_matmul(benchmark::State& state, DType wtype, Shape shape, int64_t n) {
  const int64_t m = shape.m, k = shape.k;
  const size_t rb = row_bytes(wtype, k);
  std::vector<uint8_t> w(rb * size_t(m));  // [m, k]
  std::vector<float> x(size_t(n * k)), y(size_t(n * m)), row(static_cast<size_t>(k));
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int64_t r = 0; r < m; ++r) {
    for (auto& v : row) v = g(rng) * 0.05f;
    cpu::quantize_row_ref(wtype, row.data(), w.data() + r * rb, k);
  }
  for (auto& v : x) v = g(rng);
  const cpu::MatmulArgs args{.x = x.data(),
                             .ldx = k,
                             .wtype = wtype,
                             .w = w.data(),
                             .w_row_bytes = rb,
                             .y = y.data(),
                             .ldy = m,
                             .n = n,
                             .m = m,
                             .k = k};
  for (auto _ : state) {
    cpu::matmul(args);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double iters = double(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(double(w.size()) * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(n * m * k) * iters / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(cpu::isa_name(cpu::active_isa())));
}

int register_all() {
  apply_isa_env();
  for (DType t : kTypes)
    for (const Shape& s : kShapes)
      for (int64_t n : {1, 16, 128}) {
        // K-quants need k % 256 == 0: SmolLM2's 576 is not (GGUF files use other types there).
        if (s.k % dtype_info(t).block_elems != 0) continue;
        std::string name = std::string(dtype_name(t)) + "/" + s.name + "/n" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), bm_matmul, t, s, n)->Unit(benchmark::kMicrosecond)->UseRealTime();
      }
  return 0;
}
const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
