// The CPU training step's kernels at the default model's shapes (SmolLM2-135M:
// hidden 576, 9 heads / 3 KV heads of 64, intermediate 1536, LoRA rank 16) on
// an ORPO pair of 2 × (256 + 512) tokens, one thread (the numbers are CPU
// time, so a loaded machine disturbs them less than a step's wall time):
//   - the LoRA factor gradients dA += gᵀ·x ([16, 576]) and dB += dyᵀ·u
//     ([1536, 16]) of gate_proj, on the active instruction set and on AVX2 (the
//     one-output-row-per-task loop the AVX-512 blocks replaced),
//   - the input gradient dx = dy·W through a Q4_1 gate_proj ([1536, 576]):
//     AMX with W's tiles made per call, made once, or W decoded to f32 first,
//     and the f32 panels,
//   - the training attention forward and backward over the two sequences.
//   build/<dir>/bench/train_ops_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backend/cpu/amx_gemm.h"
#include "backend/cpu/attention_backward.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/linear_backward.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/quantize.h"

namespace {

using namespace brioche;

constexpr int64_t kRows = 2 * (256 + 512), kHidden = 576, kInter = 1536, kRank = 16;
constexpr int kHeads = 9, kKvHeads = 3, kHeadDim = 64;

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void one_thread() { ThreadPool::configure_global(1); }

// dA[16, 576] += gᵀ·x (isa: 0 = active, 1 = AVX2)
void BM_LoraGradA(benchmark::State& state) {
  one_thread();
  if (state.range(0) == 1) cpu::set_isa_override(cpu::Isa::Avx2);
  auto g = random_floats(size_t(kRows * kRank), 1), x = random_floats(size_t(kRows * kHidden), 2);
  std::vector<float> da(size_t(kRank * kHidden), 0.0f);
  for (auto _ : state)
    backend::cpu::matmul_weight_grad({.dy = g.data(),
                                      .x = x.data(),
                                      .dw = da.data(),
                                      .ld_dy = kRank,
                                      .ld_x = kHidden,
                                      .ld_dw = kHidden,
                                      .n = kRows,
                                      .m = kRank,
                                      .k = kHidden});
  cpu::clear_isa_override();
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * kRows * kRank * kHidden, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LoraGradA)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// dB[1536, 16] += dyᵀ·u
void BM_LoraGradB(benchmark::State& state) {
  one_thread();
  if (state.range(0) == 1) cpu::set_isa_override(cpu::Isa::Avx2);
  auto dy = random_floats(size_t(kRows * kInter), 3), u = random_floats(size_t(kRows * kRank), 4);
  std::vector<float> db(size_t(kInter * kRank), 0.0f);
  for (auto _ : state)
    backend::cpu::matmul_weight_grad({.dy = dy.data(),
                                      .x = u.data(),
                                      .dw = db.data(),
                                      .ld_dy = kInter,
                                      .ld_x = kRank,
                                      .ld_dw = kRank,
                                      .n = kRows,
                                      .m = kInter,
                                      .k = kRank});
  cpu::clear_isa_override();
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * kRows * kRank * kInter, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LoraGradB)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// dx[rows, 576] = dy[rows, 1536]·W, W Q4_1 [1536, 576]. arg 0: AMX, W decoded
// into tiles per call; 1: AMX off, the f32 AVX-512 panels; 2: AMX through
// tiles made once (ops/amx_weight_tiles.h, what training runs); 3: AMX, W
// decoded to f32 and packed from there per call (the path before 2).
void BM_InputGradQ4_1(benchmark::State& state) {
  one_thread();
  const int64_t variant = state.range(0);
  if (variant != 1 && !cpu::amx_bf16_available()) {
    state.SkipWithError("no AMX bf16 on this CPU");
    return;
  }
  if (variant == 1 && cpu::amx_bf16_available()) cpu::set_amx_override(false);
  Tensor wf = Tensor::zeros(DType::F32, {kInter, kHidden});
  auto w = random_floats(size_t(kInter * kHidden), 5, 0.05f);
  std::copy(w.begin(), w.end(), wf.data_as<float>());
  Tensor wq = ops::convert(wf, DType::Q4_1);
  auto dy = random_floats(size_t(kRows * kInter), 6);
  std::vector<float> dx(size_t(kRows * kHidden)), decoded(size_t(kInter * kHidden));
  const backend::cpu::AmxWeight shape{.wtype = DType::Q4_1,
                                      .w = wq.data(),
                                      .w_row_bytes = size_t(wq.stride(0)),
                                      .m = kInter,
                                      .k = kHidden,
                                      .product = backend::cpu::AmxWeightProduct::InputGrad};
  std::vector<uint16_t> tiles(variant == 2 ? backend::cpu::amx_weight_tiles_size(shape) : 0);
  if (variant == 2) backend::cpu::amx_pack_weight(shape, tiles.data());
  for (auto _ : state) {
    if (variant == 3) {
      for (int64_t r = 0; r < kInter; ++r)
        ops::dequantize_row(DType::Q4_1, wq.row_ptr(r), decoded.data() + r * kHidden, kHidden);
      backend::cpu::amx_gemm({.a = dy.data(),
                              .lda = kInter,
                              .b = decoded.data(),
                              .ldb = kHidden,
                              .out = dx.data(),
                              .ldo = kHidden,
                              .rows = kRows,
                              .width = kHidden,
                              .T = kInter,
                              .accumulate = false,
                              .split = false});
      continue;
    }
    backend::cpu::matmul_input_grad({.dy = dy.data(),
                                     .wtype = DType::Q4_1,
                                     .w = wq.data(),
                                     .w_row_bytes = size_t(wq.stride(0)),
                                     .dx = dx.data(),
                                     .ld_dy = kInter,
                                     .ld_dx = kHidden,
                                     .n = kRows,
                                     .m = kInter,
                                     .k = kHidden,
                                     .accumulate = false,
                                     .w_tiles = variant == 2 ? tiles.data() : nullptr});
  }
  cpu::clear_amx_override();
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * kRows * kInter * kHidden, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_InputGradQ4_1)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

struct AttentionData {
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  std::vector<ops::AttentionSpan> spans{{0, int32_t(kRows / 2)}, {int32_t(kRows / 2), int32_t(kRows / 2)}};
  AttentionData()
      : q(random_floats(size_t(kRows * kHeads * kHeadDim), 7)),
        k(random_floats(size_t(kRows * kKvHeads * kHeadDim), 8)),
        v(random_floats(size_t(kRows * kKvHeads * kHeadDim), 9)),
        out(size_t(kRows * kHeads * kHeadDim)),
        lse(size_t(kRows * kHeads)),
        dout(random_floats(size_t(kRows * kHeads * kHeadDim), 10)),
        dq(q.size()),
        dk(k.size()),
        dv(v.size()) {}
  backend::cpu::DenseAttentionArgs args() {
    return {.q = q.data(),
            .k = k.data(),
            .v = v.data(),
            .out = out.data(),
            .lse = lse.data(),
            .dout = dout.data(),
            .out_w = out.data(),
            .lse_w = lse.data(),
            .dq = dq.data(),
            .dk = dk.data(),
            .dv = dv.data(),
            .ld_q = kHeads * kHeadDim,
            .ld_k = kKvHeads * kHeadDim,
            .ld_v = kKvHeads * kHeadDim,
            .ld_out = kHeads * kHeadDim,
            .ld_lse = kHeads,
            .ld_dout = kHeads * kHeadDim,
            .ld_dq = kHeads * kHeadDim,
            .ld_dk = kKvHeads * kHeadDim,
            .ld_dv = kKvHeads * kHeadDim,
            .layout = {.spans = spans},
            .params = {.n_heads = kHeads, .n_kv_heads = kKvHeads, .head_dim = kHeadDim, .scale = 0.125f}};
  }
};

// Causal pairs × heads × head_dim × 2 products × 2 flops.
double attention_flops() { return 2.0 * (kRows / 2) * (kRows / 2 + 1) / 2 * kHeads * kHeadDim * 2 * 2; }

void BM_AttentionForward(benchmark::State& state) {
  one_thread();
  AttentionData d;
  for (auto _ : state) backend::cpu::dense_attention(d.args());
  state.counters["GFLOP/s"] = benchmark::Counter(attention_flops(), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionForward)->Unit(benchmark::kMillisecond);

// Backward: 5 products (s, dp, dv, dq, dk), counted as 2.5 forwards.
void BM_AttentionBackward(benchmark::State& state) {
  one_thread();
  AttentionData d;
  backend::cpu::dense_attention(d.args());
  for (auto _ : state) backend::cpu::dense_attention_backward(d.args());
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.5 * attention_flops(), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionBackward)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
