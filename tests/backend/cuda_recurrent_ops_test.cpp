// Qwen 3.5's recurrent ops on CUDA against the CPU kernels, through ops/:
// the causal conv1d and the gated delta rule over ragged batches (a prompt
// of many chunks in one forward with splits and checkpoints, a prompt
// continued from a slot's state at a position off the chunk grid, decode
// steps one row a forward across chunk boundaries, several sequences in one
// batch), the delta-rule gates and the sigmoid gate. Outputs and every
// slot's state are compared. Without a GPU each test reports
// "skipped: no CUDA device".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "ops/causal_conv1d.h"
#include "ops/device.h"
#include "ops/gated_delta_rule.h"
#include "ops/sigmoid_gate.h"
#include "require_cuda.h"

namespace brioche::ops {
namespace {

Tensor random_tensor(std::initializer_list<int64_t> shape, float lo, float hi, uint32_t seed) {
  Tensor t = Tensor::zeros(DType::F32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

Tensor on_cuda(const Tensor& t) { return to_device(t, Device::CUDA); }
Tensor on_host(const Tensor& t) { return to_device(t, Device::CPU); }

// max |a − b| over max |a| (both host tensors of one shape); NaN if any is.
double relative_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double err = 0, scale = 1e-6;
  const float *x = a.data_as<float>(), *y = b.data_as<float>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (!std::isfinite(y[i])) return NAN;
    err = std::max(err, std::abs(double(x[i]) - double(y[i])));
    scale = std::max(scale, std::abs(double(x[i])));
  }
  return err / scale;
}

// One batch of sequences: the spans in RecurrentSequence point into these.
struct Batch {
  struct Seq {
    int32_t n_rows, slot, first_position;
    bool starts;
    std::vector<int32_t> splits;
    std::vector<StateCheckpoint> checkpoints;
  };
  std::vector<Seq> seqs;
  std::vector<RecurrentSequence> views() const {
    std::vector<RecurrentSequence> v;
    int32_t row = 0;
    for (const Seq& s : seqs) {
      v.push_back({.first_row = row,
                   .n_rows = s.n_rows,
                   .state_slot = s.slot,
                   .starts = s.starts,
                   .first_position = s.first_position,
                   .splits = s.splits,
                   .checkpoints = s.checkpoints});
      row += s.n_rows;
    }
    return v;
  }
  int64_t n_rows() const {
    int64_t n = 0;
    for (const Seq& s : seqs) n += s.n_rows;
    return n;
  }
};

constexpr double kBound = 2e-5;  // relative; the CPU's own two forms differ by ≤ 1.1e-6

// ---- causal conv1d ----

struct ConvCase {
  int channels = 224, kernel = 4, slots = 6;
  Tensor weight = random_tensor({224, 4}, -0.5f, 0.5f, 1);
  Tensor cpu_state = random_tensor({6, 3, 224}, -1, 1, 2);
  Tensor gpu_state = on_cuda(cpu_state);

  // Runs `batch` on both devices; expects outputs and states to agree.
  void run(const Batch& batch, uint32_t seed) {
    const std::vector<RecurrentSequence> views = batch.views();
    const int64_t n = batch.n_rows();
    // x as a strided view (the model's rows are a wider tensor's columns).
    Tensor wide = random_tensor({n, channels + 8}, -1, 1, seed);
    Tensor x = wide.slice(1, 4, 4 + channels), out = Tensor::zeros(DType::F32, {n, channels});
    Tensor gwide = on_cuda(wide), gw = on_cuda(weight);
    Tensor gx = gwide.slice(1, 4, 4 + channels), gout = zeros(DType::F32, {n, channels}, Device::CUDA);
    causal_conv1d_silu(x, weight, views, cpu_state, out);
    causal_conv1d_silu(gx, gw, views, gpu_state, gout);
    EXPECT_LT(relative_error(out, on_host(gout)), kBound);
    EXPECT_LT(relative_error(cpu_state, on_host(gpu_state)), kBound);
  }
};

TEST(CudaRecurrentOps, CausalConv1dPrefillDecodeAndCheckpoints) {
  REQUIRE_CUDA_DEVICE();
  ConvCase c;
  // A 200-row prompt from scratch with checkpoints at 0, 16 and 64; a
  // 5-row and a 1-row sequence continuing their slots' states.
  Batch b{{{.n_rows = 200, .slot = 0, .first_position = 0, .starts = true, .checkpoints = {{0, 3}, {16, 4}, {64, 5}}},
           {.n_rows = 5, .slot = 1, .first_position = 7, .starts = false},
           {.n_rows = 1, .slot = 2, .first_position = 30, .starts = false}}};
  c.run(b, 10);
  // Decode steps of the first sequence, then one row ending in a checkpoint.
  for (int step = 0; step < 20; ++step)
    c.run(Batch{{{.n_rows = 1, .slot = 0, .first_position = 200 + step, .starts = false}}}, 20 + step);
  c.run(Batch{{{.n_rows = 2, .slot = 0, .first_position = 220, .starts = false, .checkpoints = {{222, 3}}}}}, 50);
}

// ---- gated delta rule ----

struct DeltaCase {
  DeltaRuleShape shape;
  int slots = 6;
  Tensor cpu_state, gpu_state;

  explicit DeltaCase(DeltaRuleShape s) : shape(s) {
    cpu_state = random_tensor({slots, s.n_v_heads, s.key_dim, s.value_dim}, -0.3f, 0.3f, 3);
    gpu_state = on_cuda(cpu_state);
  }

  void run(const Batch& batch, uint32_t seed) {
    const std::vector<RecurrentSequence> views = batch.views();
    const int64_t n = batch.n_rows(), kw = int64_t(shape.n_k_heads) * shape.key_dim,
                  vw = int64_t(shape.n_v_heads) * shape.value_dim, vh = shape.n_v_heads;
    Tensor qkv = random_tensor({n, 2 * kw + vw}, -1, 1, seed);
    // Decays e^g in [0.37, 0.99]: over a chunk the cumulative decay reaches e^-16.
    Tensor g = random_tensor({n, vh}, -1.0f, -0.01f, seed + 1), beta = random_tensor({n, vh}, 0, 1, seed + 2);
    Tensor out = Tensor::zeros(DType::F32, {n, vw});
    Tensor gqkv = on_cuda(qkv), gg = on_cuda(g), gbeta = on_cuda(beta), gout = zeros(DType::F32, {n, vw}, Device::CUDA);
    gated_delta_rule({.q = qkv.slice(1, 0, kw),
                      .k = qkv.slice(1, kw, 2 * kw),
                      .v = qkv.slice(1, 2 * kw, 2 * kw + vw),
                      .g = g,
                      .beta = beta},
                     shape, views, cpu_state, out);
    gated_delta_rule({.q = gqkv.slice(1, 0, kw),
                      .k = gqkv.slice(1, kw, 2 * kw),
                      .v = gqkv.slice(1, 2 * kw, 2 * kw + vw),
                      .g = gg,
                      .beta = gbeta},
                     shape, views, gpu_state, gout);
    const double out_err = relative_error(out, on_host(gout)),
                 state_err = relative_error(cpu_state, on_host(gpu_state));
    EXPECT_LT(out_err, kBound) << "rows " << n;
    EXPECT_LT(state_err, kBound) << "rows " << n;
  }
};

void long_prompt_decode_and_batch(DeltaRuleShape shape) {
  DeltaCase c(shape);
  // 200 rows from scratch (12 chunks and a piece) with a split at 37 and
  // checkpoints at 16 and 96, beside a prompt continued from its slot at
  // position 13 (off the chunk grid) and a decode row.
  c.run(Batch{{{.n_rows = 200,
                .slot = 0,
                .first_position = 0,
                .starts = true,
                .splits = {37},
                .checkpoints = {{16, 3}, {96, 4}}},
               {.n_rows = 59, .slot = 1, .first_position = 13, .starts = false, .splits = {40}},
               {.n_rows = 1, .slot = 2, .first_position = 50, .starts = false}}},
        100);
  // 40 decode steps of the first sequence, one row a forward (across
  // positions 208, 224), then a 3-row piece ending in a checkpoint.
  for (int step = 0; step < 40; ++step)
    c.run(Batch{{{.n_rows = 1, .slot = 0, .first_position = 200 + step, .starts = false}}}, 200 + 3 * step);
  c.run(Batch{{{.n_rows = 3, .slot = 0, .first_position = 240, .starts = false, .checkpoints = {{243, 5}}}}}, 400);
  // A prompt of 77 rows then 64 then 59 (the model tests' chunks) from a
  // checkpointed slot.
  for (int32_t pos = 0; int32_t rows : {77, 64, 59}) {
    c.run(Batch{{{.n_rows = rows, .slot = 4, .first_position = 96 + pos, .starts = false}}}, 500 + pos);
    pos += rows;
  }
}

TEST(CudaRecurrentOps, GatedDeltaRuleSmallHeads) {
  REQUIRE_CUDA_DEVICE();
  long_prompt_decode_and_batch({.n_k_heads = 2, .n_v_heads = 4, .key_dim = 32, .value_dim = 24});
}

// Qwen 3.5's head shape (128 × 128: the state and chunk scratch take 110 KB
// of shared memory), two value heads per key head.
TEST(CudaRecurrentOps, GatedDeltaRuleQwenHeads) {
  REQUIRE_CUDA_DEVICE();
  long_prompt_decode_and_batch({.n_k_heads = 2, .n_v_heads = 4, .key_dim = 128, .value_dim = 128});
}

// ---- gates ----

TEST(CudaRecurrentOps, DeltaRuleGatesAndSigmoidGate) {
  REQUIRE_CUDA_DEVICE();
  const int64_t n = 37, heads = 12;
  Tensor a = random_tensor({n, heads}, -30, 30, 5), b = random_tensor({n, heads}, -8, 8, 6);
  Tensor a_log = random_tensor({heads}, -2, 2, 7), dt_bias = random_tensor({heads}, -1, 1, 8);
  Tensor g = Tensor::zeros(DType::F32, {n, heads}), beta = Tensor::zeros(DType::F32, {n, heads});
  Tensor gg = zeros(DType::F32, {n, heads}, Device::CUDA), gbeta = zeros(DType::F32, {n, heads}, Device::CUDA);
  delta_rule_gates(a, b, {.a_log = a_log, .dt_bias = dt_bias}, g, beta);
  const Tensor ga = on_cuda(a), gb = on_cuda(b), gl = on_cuda(a_log), gd = on_cuda(dt_bias);
  delta_rule_gates(ga, gb, {.a_log = gl, .dt_bias = gd}, gg, gbeta);
  EXPECT_LT(relative_error(g, on_host(gg)), 1e-6);
  EXPECT_LT(relative_error(beta, on_host(gbeta)), 1e-6);

  // Per element with a strided gate (the attention's [query | gate] rows),
  // and one gate per row.
  Tensor qg = random_tensor({n, 2 * 40}, -6, 6, 9), x = random_tensor({n, 40}, -2, 2, 10);
  Tensor gqg = on_cuda(qg), gx = on_cuda(x);
  sigmoid_gate(qg.slice(1, 40, 80), x);
  sigmoid_gate(gqg.slice(1, 40, 80), gx);
  EXPECT_LT(relative_error(x, on_host(gx)), 1e-6);
  Tensor row_gate = random_tensor({n, 1}, -6, 6, 11), gr = on_cuda(row_gate);
  sigmoid_gate(row_gate, x);
  sigmoid_gate(gr, gx);
  EXPECT_LT(relative_error(x, on_host(gx)), 1e-6);
}

}  // namespace
}  // namespace brioche::ops
