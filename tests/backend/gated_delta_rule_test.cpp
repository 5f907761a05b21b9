// The gated delta rule's chunked form against its recurrent form (both in
// backend/cpu/gated_delta_rule.cpp), and the vectorised causal conv1d against
// a scalar reference written here from the formula.
#include "backend/cpu/gated_delta_rule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/causal_conv1d.h"

namespace brioche::backend::cpu {
namespace {

constexpr int kKHeads = 2, kVHeads = 4, kDk = 32, kDv = 24;  // grouped heads, dk ≠ dv
constexpr int kWidth = 2 * kKHeads * kDk + kVHeads * kDv;    // q | k | v per row

std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct Rows {
  int n;
  std::vector<float> qkv, g, beta;
  // Decays e^g in [0.37, 0.99] per row by default: over a 64-row chunk the
  // cumulative decay reaches e^-64 (where the form must not overflow).
  explicit Rows(int rows, float g_min = -1.0f, float g_max = -0.01f)
      : n(rows),
        qkv(random_floats(size_t(rows) * kWidth, -1, 1, 7)),
        g(random_floats(size_t(rows) * kVHeads, g_min, g_max, 8)),
        beta(random_floats(size_t(rows) * kVHeads, 0.0f, 1.0f, 9)) {}
};

struct Result {
  std::vector<float> out, state;
};

// Runs `rows` as forwards split at `splits` (positions), with `chunk`.
Result run(const Rows& r, int chunk, const std::vector<int>& splits = {}) {
  Result res{std::vector<float>(size_t(r.n) * kVHeads * kDv, 0.0f),
             std::vector<float>(size_t(kVHeads) * kDk * kDv, 0.0f)};
  std::vector<int> bounds = {0};
  bounds.insert(bounds.end(), splits.begin(), splits.end());
  bounds.push_back(r.n);
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    const ops::RecurrentSequence seq{.first_row = bounds[i],
                                     .n_rows = bounds[i + 1] - bounds[i],
                                     .state_slot = 0,
                                     .starts = i == 0,
                                     .first_position = bounds[i]};
    gated_delta_rule({.q = r.qkv.data(),
                      .k = r.qkv.data() + kKHeads * kDk,
                      .v = r.qkv.data() + 2 * kKHeads * kDk,
                      .g = r.g.data(),
                      .beta = r.beta.data(),
                      .state = res.state.data(),
                      .out = res.out.data(),
                      .q_stride = kWidth,
                      .k_stride = kWidth,
                      .v_stride = kWidth,
                      .g_stride = kVHeads,
                      .beta_stride = kVHeads,
                      .out_stride = kVHeads * kDv,
                      .n_k_heads = kKHeads,
                      .n_v_heads = kVHeads,
                      .key_dim = kDk,
                      .value_dim = kDv,
                      .sequences = {&seq, 1},
                      .chunk_size = chunk});
  }
  return res;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double err = 0;
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::abs(double(a[i]) - double(b[i])));
  return err;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, double(std::abs(x)));
  return m;
}

// 200 rows (three full chunks of 64 and a partial one): outputs and the
// final state of the chunked form equal the recurrent form's within 2e-5
// of their largest magnitude (measured: ~1e-6).
TEST(GatedDeltaRule, ChunkedFormEqualsRecurrentForm) {
  const Rows r(200);
  const Result recurrent = run(r, 1);
  for (int chunk : {2, 16, 64}) {
    const Result chunked = run(r, chunk);
    const double out_err = max_abs_diff(chunked.out, recurrent.out) / max_abs(recurrent.out);
    const double state_err = max_abs_diff(chunked.state, recurrent.state) / max_abs(recurrent.state);
    EXPECT_LT(out_err, 2e-5) << "chunk " << chunk;
    EXPECT_LT(state_err, 2e-5) << "chunk " << chunk;
    std::printf("[ measured ] chunk %d: relative max error out %.2e, state %.2e\n", chunk, out_err, state_err);
  }
}

// Strong decays (g down to −20 a row: e^γ underflows within a chunk, through
// the denormals the kernel flushes to zero): still the recurrent form's
// outputs, and finite.
TEST(GatedDeltaRule, StrongDecaysMatchTheRecurrentForm) {
  const Rows r(100, -20.0f, -0.5f);
  const Result recurrent = run(r, 1), chunked = run(r, 16);
  for (float x : chunked.out) ASSERT_TRUE(std::isfinite(x));
  EXPECT_LT(max_abs_diff(chunked.out, recurrent.out) / max_abs(recurrent.out), 2e-5);
  EXPECT_LT(max_abs_diff(chunked.state, recurrent.state) / max_abs(recurrent.state), 2e-5);
}

// Forwards split at multiples of the chunk compute the same chunks: bit for
// bit what one forward over every row computes (what makes prefix reuse of
// hybrid models exact: docs/server.md).
TEST(GatedDeltaRule, SplitsOnChunkBoundariesChangeNothing) {
  const Rows r(200);
  const Result whole = run(r, 64);
  const Result split = run(r, 64, {64, 192});
  EXPECT_EQ(split.out, whole.out);
  EXPECT_EQ(split.state, whole.state);
  // A split inside a chunk changes the chunks (not the result beyond rounding).
  const Result inside = run(r, 64, {70, 71});
  EXPECT_LT(max_abs_diff(inside.out, whole.out) / max_abs(whole.out), 2e-5);
}

// Decode rows (one row per forward) take the recurrent form: a prompt then
// single rows equal the recurrent form everywhere after the prompt.
TEST(GatedDeltaRule, SingleRowsAreRecurrentSteps) {
  const Rows r(80);
  std::vector<int> splits;
  for (int p = 64; p < 80; ++p) splits.push_back(p);
  const Result stepped = run(r, 64, splits);
  const Result recurrent = run(r, 1, {64});
  EXPECT_LT(max_abs_diff(stepped.state, recurrent.state) / max_abs(recurrent.state), 2e-5);
}

// One forward over every row of `r` in slot 0 of `n_slots` slots, cut at
// `splits` inside it and copying the state to `checkpoints`.
Result run_once(const Rows& r, const std::vector<int32_t>& splits,
                const std::vector<ops::StateCheckpoint>& checkpoints = {}, int n_slots = 1) {
  Result res{std::vector<float>(size_t(r.n) * kVHeads * kDv, 0.0f),
             std::vector<float>(size_t(n_slots) * kVHeads * kDk * kDv, 0.0f)};
  const ops::RecurrentSequence seq{.first_row = 0,
                                   .n_rows = r.n,
                                   .state_slot = 0,
                                   .starts = true,
                                   .first_position = 0,
                                   .splits = splits,
                                   .checkpoints = checkpoints};
  gated_delta_rule({.q = r.qkv.data(),
                    .k = r.qkv.data() + kKHeads * kDk,
                    .v = r.qkv.data() + 2 * kKHeads * kDk,
                    .g = r.g.data(),
                    .beta = r.beta.data(),
                    .state = res.state.data(),
                    .out = res.out.data(),
                    .q_stride = kWidth,
                    .k_stride = kWidth,
                    .v_stride = kWidth,
                    .g_stride = kVHeads,
                    .beta_stride = kVHeads,
                    .out_stride = kVHeads * kDv,
                    .n_k_heads = kKHeads,
                    .n_v_heads = kVHeads,
                    .key_dim = kDk,
                    .value_dim = kDv,
                    .sequences = {&seq, 1},
                    .chunk_size = 16});
  return res;
}

// A forward told where earlier forwards ended (RecurrentSequence::splits)
// computes bit for bit what those forwards computed: a prompt, decode
// rows one by one, then a chunk (what a preempted sequence's recompute
// replays in one forward).
TEST(GatedDeltaRule, SplitsInOneForwardEqualSeparateForwards) {
  const Rows r(120);
  std::vector<int> ends = {37};
  for (int p = 38; p < 60; ++p) ends.push_back(p);
  ends.push_back(75);  // a chunk of 15 across the grid at 64
  const Result separate = run(r, 16, ends);
  const Result once = run_once(r, std::vector<int32_t>(ends.begin(), ends.end()));
  EXPECT_EQ(once.out, separate.out);
  EXPECT_EQ(once.state, separate.state);
  // Without the splits the outputs differ (in the last bits; the state's
  // difference decays away over the rows after them).
  EXPECT_NE(run_once(r, {}).out, separate.out);
}

// A checkpoint holds the state after the rows before its position: that of
// a forward over those rows alone.
TEST(GatedDeltaRule, CheckpointsHoldTheStateAtTheirPosition) {
  const Rows r(120);
  const Result once = run_once(r, {}, {{.position = 32, .slot = 1}, {.position = 96, .slot = 2}}, 3);
  const size_t slot = size_t(kVHeads) * kDk * kDv;
  for (int at : {32, 96}) {
    Rows prefix = r;
    prefix.n = at;
    const Result upto = run_once(prefix, {});
    const std::vector<float> copy(once.state.begin() + (at == 32 ? 1 : 2) * slot,
                                  once.state.begin() + (at == 32 ? 2 : 3) * slot);
    EXPECT_EQ(copy, upto.state) << "checkpoint at " << at;
  }
  EXPECT_EQ(once.out, run_once(r, {}).out);  // checkpoints on the grid change nothing
}

// out_t[c] = silu(Σ_j w[c][j] · in_{t−(K−1)+j}[c]) with the state's inputs
// before the first row, straight from the formula.
TEST(CausalConv1d, VectorisedEqualsScalarFormula) {
  constexpr int kChannels = 300, kKernel = 4, kHistory = kKernel - 1;  // channels not a multiple of 8 or 256
  for (int rows : {1, 2, 5, 40}) {
    const std::vector<float> x = random_floats(size_t(rows) * kChannels, -2, 2, 11);
    const std::vector<float> w = random_floats(size_t(kChannels) * kKernel, -1, 1, 12);
    const std::vector<float> old_state = random_floats(size_t(kHistory) * kChannels, -2, 2, 13);
    std::vector<float> state = old_state, out(size_t(rows) * kChannels);
    const ops::RecurrentSequence seq{.first_row = 0, .n_rows = rows, .state_slot = 0, .starts = false};
    causal_conv1d_silu({.x = x.data(),
                        .weight = w.data(),
                        .state = state.data(),
                        .out = out.data(),
                        .x_stride = kChannels,
                        .out_stride = kChannels,
                        .channels = kChannels,
                        .kernel = kKernel,
                        .sequences = {&seq, 1}});
    auto input = [&](int s, int c) {  // s relative to the first row
      return s >= 0 ? x[size_t(s) * kChannels + size_t(c)] : old_state[size_t(kHistory + s) * kChannels + size_t(c)];
    };
    double err = 0;
    for (int t = 0; t < rows; ++t)
      for (int c = 0; c < kChannels; ++c) {
        double acc = 0;
        for (int j = 0; j < kKernel; ++j)
          acc += double(w[size_t(c) * kKernel + size_t(j)]) * input(t - kHistory + j, c);
        const double want = acc / (1 + std::exp(-acc));
        err = std::max(err, std::abs(want - double(out[size_t(t) * kChannels + size_t(c)])));
      }
    EXPECT_LT(err, 1e-5) << rows << " rows";
    for (int j = 0; j < kHistory; ++j)
      for (int c = 0; c < kChannels; ++c)
        ASSERT_EQ(state[size_t(j) * kChannels + size_t(c)], input(rows - kHistory + j, c)) << rows << " rows";
  }
}

// A conv checkpoint holds the K-1 inputs before its position, from the old
// state where the position is near the first row.
TEST(CausalConv1d, CheckpointsHoldTheInputsBeforeTheirPosition) {
  constexpr int kChannels = 300, kKernel = 4, kHistory = kKernel - 1, kRows = 10;
  const std::vector<float> x = random_floats(size_t(kRows) * kChannels, -2, 2, 21);
  const std::vector<float> w = random_floats(size_t(kChannels) * kKernel, -1, 1, 22);
  const size_t slot = size_t(kHistory) * kChannels;
  std::vector<float> state = random_floats(slot * 3, -2, 2, 23), out(size_t(kRows) * kChannels);
  const std::vector<float> old_state(state.begin(), state.begin() + ptrdiff_t(slot));
  const std::vector<ops::StateCheckpoint> checkpoints = {{.position = 101, .slot = 1}, {.position = 107, .slot = 2}};
  const ops::RecurrentSequence seq{
      .first_row = 0, .n_rows = kRows, .state_slot = 0, .first_position = 100, .checkpoints = checkpoints};
  causal_conv1d_silu({.x = x.data(),
                      .weight = w.data(),
                      .state = state.data(),
                      .out = out.data(),
                      .x_stride = kChannels,
                      .out_stride = kChannels,
                      .channels = kChannels,
                      .kernel = kKernel,
                      .sequences = {&seq, 1}});
  auto input = [&](int s, int c) {  // s relative to the first row
    return s >= 0 ? x[size_t(s) * kChannels + size_t(c)] : old_state[size_t(kHistory + s) * kChannels + size_t(c)];
  };
  for (const ops::StateCheckpoint& cp : checkpoints)
    for (int j = 0; j < kHistory; ++j)
      for (int c = 0; c < kChannels; ++c)
        ASSERT_EQ(state[size_t(cp.slot) * slot + size_t(j) * kChannels + size_t(c)],
                  input(cp.position - 100 - kHistory + j, c))
            << "checkpoint at " << cp.position;
}

}  // namespace
}  // namespace brioche::backend::cpu
