// The CUDA training attention (backend/cuda/attention_train.h, through
// ops::dense_attention / ops::dense_attention_backward) against the CPU op
// (itself checked by finite differences in tests/train/backward_ops_test.cpp):
// out, lse, dq, dk, dv over plain causal spans, several spans of odd lengths,
// the prefix-shared [prompt; chosen; rejected] branch mask, sliding windows
// over per-branch positions, GQA groups of 1..8, head_dim 64 and 128, strided
// rows (sentinels in the padding must survive).
//
// Tolerance class: bf16 tensor-core inputs (q, k, v, dout, and p / dS as mma
// operands, relative rounding 2^-9 each) with f32 softmax and accumulation:
//   out, dq, dk, dv: NMSE < 1e-4 (the harness's bf16 GEMM class)
//   lse (natural log): max |Δ| < 1e-2·σq² for q ~ N(0, σq²): its error is the
//   error of the largest scores, which grows with them (H200: 3.6e-3..6.2e-3
//   at σq = 1, 1.4e-2..1.9e-2 at σq = 2)
// The backward of both backends is fed the CPU forward's out and lse, so its
// error is its own. Without a GPU every test reports "skipped: no CUDA device".
#include <gtest/gtest.h>

#if BRIOCHE_CUDA

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/attention_backward.h"
#include "ops/device.h"
#include "require_cuda.h"

namespace brioche::ops {
namespace {

constexpr float kSentinel = -12345.678f;
constexpr double kNmseBound = 1e-4;
constexpr double kLseBoundPerSigma2 = 1e-2;

// A [rows, cols] f32 CPU tensor viewed out of [rows, cols + pad] storage
// (the padding holds sentinels), filled with N(0, sigma²).
struct Padded {
  Tensor storage, view;
};
Padded random_rows(int64_t rows, int64_t cols, int64_t pad, uint32_t seed, float sigma) {
  Tensor storage = Tensor::zeros(DType::F32, {rows, cols + pad});
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sigma);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols + pad; ++c) storage.row_as<float>(r)[c] = c < cols ? g(rng) : kSentinel;
  return {storage, storage.slice(1, 0, cols)};
}

// A device copy with the same padding (sentinels) and a view of its columns.
Padded on_device(const Padded& host) {
  Tensor storage = to_device(host.storage, Device::CUDA);
  return {storage, storage.slice(1, 0, host.view.dim(1))};
}

// NMSE of the columns of `got` (device) against `want` (host); the padding
// of `got` must still hold sentinels.
double nmse_checked(const Padded& got_device, const Tensor& want, const char* what) {
  Tensor got = to_device(got_device.storage, Device::CPU);
  const int64_t cols = want.dim(1);
  double num = 0, den = 0;
  for (int64_t r = 0; r < want.dim(0); ++r) {
    const float* g = got.row_as<float>(r);
    const float* w = want.row_as<float>(r);
    for (int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(g[c])) {
        ADD_FAILURE() << what << ": non-finite " << g[c] << " at row " << r << " col " << c;
        return INFINITY;
      }
      num += (double(g[c]) - w[c]) * (double(g[c]) - w[c]);
      den += double(w[c]) * w[c];
    }
    for (int64_t c = cols; c < got.dim(1); ++c)
      if (g[c] != kSentinel) {
        ADD_FAILURE() << what << ": padding overwritten at row " << r << " col " << c;
        return INFINITY;
      }
  }
  return num / den;
}

double max_abs_diff(const Tensor& got_device, const Tensor& want) {
  Tensor got = to_device(got_device, Device::CPU);
  double m = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    m = std::max(m, std::abs(double(got.data_as<float>()[i]) - want.data_as<float>()[i]));
  return m;
}

struct AttentionCase {
  std::string name;
  std::vector<AttentionSpan> spans;
  std::vector<uint8_t> branch;     // empty = plain causal
  std::vector<int32_t> positions;  // with a window
  int window = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int pad = 0;        // extra floats per row of q, out, dq, k, dk
  float q_sigma = 1;  // larger = peakier softmax
};

int rows_of(const AttentionCase& c) {
  int n = 0;
  for (const auto& s : c.spans) n = std::max(n, s.first_row + s.n_rows);
  return n;
}

// A span laid out as [prompt; chosen; rejected] (branches 0, 1, 2) starting
// at `first_row`; positions restart at the prompt length in each branch.
void add_prefix_shared(AttentionCase& c, int first_row, int prompt, int chosen, int rejected) {
  c.spans.push_back({first_row, prompt + chosen + rejected});
  c.branch.resize(size_t(first_row + prompt + chosen + rejected));
  c.positions.resize(c.branch.size());
  for (int i = 0; i < prompt + chosen + rejected; ++i) {
    const int row = first_row + i;
    c.branch[size_t(row)] = uint8_t(i < prompt ? 0 : i < prompt + chosen ? 1 : 2);
    c.positions[size_t(row)] = i < prompt + chosen ? i : i - chosen;
  }
}

void add_causal(AttentionCase& c, int first_row, int n) {
  c.spans.push_back({first_row, n});
  if (!c.branch.empty() || !c.positions.empty()) {
    c.branch.resize(size_t(first_row + n), 0);
    c.positions.resize(size_t(first_row + n));
    for (int i = 0; i < n; ++i) c.positions[size_t(first_row + i)] = i;
  }
}

void check_case(const AttentionCase& c) {
  SCOPED_TRACE(c.name);
  const int n = rows_of(c), hd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim;
  const DenseAttentionLayout layout{.spans = c.spans, .branch = c.branch, .positions = c.positions};
  const DenseAttentionParams params{.n_heads = c.n_heads,
                                    .n_kv_heads = c.n_kv_heads,
                                    .head_dim = c.head_dim,
                                    .scale = 1.0f / std::sqrt(float(c.head_dim)),
                                    .sliding_window = c.window};
  const Padded q = random_rows(n, hd, c.pad, 1, c.q_sigma), k = random_rows(n, kvd, c.pad, 2, 1.0f),
               v = random_rows(n, kvd, 0, 3, 1.0f), dout = random_rows(n, hd, 0, 4, 1.0f);

  // CPU reference.
  Tensor out_ref = Tensor::zeros(DType::F32, {n, hd}), lse_ref = Tensor::zeros(DType::F32, {n, c.n_heads});
  dense_attention({.q = q.view, .k = k.view, .v = v.view}, layout, params, out_ref, lse_ref);
  Tensor dq_ref = Tensor::zeros(DType::F32, {n, hd}), dk_ref = Tensor::zeros(DType::F32, {n, kvd}),
         dv_ref = Tensor::zeros(DType::F32, {n, kvd});
  dense_attention_backward({.q = q.view, .k = k.view, .v = v.view}, {.out = out_ref, .lse = lse_ref, .dout = dout.view},
                           layout, params, {.dq = dq_ref, .dk = dk_ref, .dv = dv_ref});

  // CUDA, outputs in padded storage full of sentinels.
  Padded out = on_device(random_rows(n, hd, c.pad, 5, 1.0f)), dq = on_device(random_rows(n, hd, c.pad, 6, 1.0f)),
         dk = on_device(random_rows(n, kvd, c.pad, 7, 1.0f)), dv = on_device(random_rows(n, kvd, 0, 8, 1.0f));
  Tensor lse = zeros(DType::F32, {n, c.n_heads}, Device::CUDA);
  const Padded qd = on_device(q), kd = on_device(k), vd = on_device(v), doutd = on_device(dout);
  dense_attention({.q = qd.view, .k = kd.view, .v = vd.view}, layout, params, out.view, lse);
  const Tensor out_ref_d = to_device(out_ref, Device::CUDA), lse_ref_d = to_device(lse_ref, Device::CUDA);
  dense_attention_backward({.q = qd.view, .k = kd.view, .v = vd.view},
                           {.out = out_ref_d, .lse = lse_ref_d, .dout = doutd.view}, layout, params,
                           {.dq = dq.view, .dk = dk.view, .dv = dv.view});
  synchronize(Device::CUDA);

  const double e_out = nmse_checked(out, out_ref, "out"), e_lse = max_abs_diff(lse, lse_ref);
  const double e_dq = nmse_checked(dq, dq_ref, "dq"), e_dk = nmse_checked(dk, dk_ref, "dk"),
               e_dv = nmse_checked(dv, dv_ref, "dv");
  std::printf("  %-34s out %.1e  lse max|d| %.1e  dq %.1e  dk %.1e  dv %.1e\n", c.name.c_str(), e_out, e_lse, e_dq,
              e_dk, e_dv);
  EXPECT_LT(e_out, kNmseBound);
  EXPECT_LT(e_lse, kLseBoundPerSigma2 * c.q_sigma * c.q_sigma);
  EXPECT_LT(e_dq, kNmseBound);
  EXPECT_LT(e_dk, kNmseBound);
  EXPECT_LT(e_dv, kNmseBound);
}

TEST(CudaAttentionTrain, PlainCausalOddLength) {
  REQUIRE_CUDA_DEVICE();
  for (int d : {64, 128}) {
    AttentionCase c{.name = "causal 200 d" + std::to_string(d), .n_heads = 9, .n_kv_heads = 3, .head_dim = d};
    add_causal(c, 0, 200);
    check_case(c);
  }
}

TEST(CudaAttentionTrain, SeveralSpansOfDifferentLengths) {
  REQUIRE_CUDA_DEVICE();
  for (int d : {64, 128}) {
    AttentionCase c{.name = "spans d" + std::to_string(d), .n_heads = 4, .n_kv_heads = 2, .head_dim = d, .pad = 3};
    int row = 0;
    for (int len : {37, 130, 64, 1, 90, 128}) {
      add_causal(c, row, len);
      row += len;
    }
    check_case(c);
  }
}

TEST(CudaAttentionTrain, PrefixSharedBranches) {
  REQUIRE_CUDA_DEVICE();
  for (int d : {64, 128}) {
    // An odd split (blocks of mixed branches) and a tile-aligned one (whole
    // tiles skipped and fully visible), in one call.
    AttentionCase c{.name = "prefix-shared d" + std::to_string(d),
                    .n_heads = d == 64 ? 9 : 8,
                    .n_kv_heads = d == 64 ? 3 : 2,
                    .head_dim = d,
                    .q_sigma = 2.0f};
    add_prefix_shared(c, 0, 70, 100, 77);
    add_prefix_shared(c, 247, 128, 192, 128);
    add_causal(c, 247 + 448, 45);
    check_case(c);
  }
}

TEST(CudaAttentionTrain, SlidingWindow) {
  REQUIRE_CUDA_DEVICE();
  for (int d : {64, 128}) {
    AttentionCase c{
        .name = "window 50 d" + std::to_string(d), .window = 50, .n_heads = 4, .n_kv_heads = 4, .head_dim = d};
    c.positions.resize(0);
    c.spans.push_back({0, 300});
    for (int i = 0; i < 300; ++i) c.positions.push_back(i);
    check_case(c);
    AttentionCase b{.name = "window 96 + branches d" + std::to_string(d),
                    .window = 96,
                    .n_heads = 8,
                    .n_kv_heads = 2,
                    .head_dim = d};
    add_prefix_shared(b, 0, 150, 130, 141);
    add_prefix_shared(b, 421, 256, 256, 192);
    check_case(b);
  }
}

TEST(CudaAttentionTrain, GqaGroups) {
  REQUIRE_CUDA_DEVICE();
  for (int kv : {8, 2, 1}) {
    for (int d : {64, 128}) {
      AttentionCase c{.name = "gqa 8/" + std::to_string(kv) + " d" + std::to_string(d),
                      .n_heads = 8,
                      .n_kv_heads = kv,
                      .head_dim = d,
                      .pad = 5};
      add_prefix_shared(c, 0, 90, 61, 83);
      check_case(c);
    }
  }
}

TEST(CudaAttentionTrain, LongerPrefixSharedSpan) {
  REQUIRE_CUDA_DEVICE();
  AttentionCase c{
      .name = "prefix-shared 512+700+650 d128", .n_heads = 4, .n_kv_heads = 2, .head_dim = 128, .q_sigma = 2.0f};
  add_prefix_shared(c, 0, 512, 700, 650);
  check_case(c);
}

// No atomics: the same inputs give the same gradient bits every run.
TEST(CudaAttentionTrain, BackwardIsDeterministic) {
  REQUIRE_CUDA_DEVICE();
  AttentionCase c{.name = "determinism", .n_heads = 8, .n_kv_heads = 2, .head_dim = 128};
  add_prefix_shared(c, 0, 300, 260, 270);
  const int n = rows_of(c), hd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim;
  const DenseAttentionLayout layout{.spans = c.spans, .branch = c.branch};
  const DenseAttentionParams params{
      .n_heads = c.n_heads, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .scale = 0.088f};
  const Tensor q = on_device(random_rows(n, hd, 0, 11, 1.0f)).view,
               k = on_device(random_rows(n, kvd, 0, 12, 1.0f)).view,
               v = on_device(random_rows(n, kvd, 0, 13, 1.0f)).view,
               dout = on_device(random_rows(n, hd, 0, 14, 1.0f)).view;
  Tensor out = zeros(DType::F32, {n, hd}, Device::CUDA), lse = zeros(DType::F32, {n, c.n_heads}, Device::CUDA);
  dense_attention({.q = q, .k = k, .v = v}, layout, params, out, lse);
  std::vector<Tensor> runs;
  for (int run = 0; run < 2; ++run) {
    Tensor dq = zeros(DType::F32, {n, hd}, Device::CUDA), dk = zeros(DType::F32, {n, kvd}, Device::CUDA),
           dv = zeros(DType::F32, {n, kvd}, Device::CUDA);
    dense_attention_backward({.q = q, .k = k, .v = v}, {.out = out, .lse = lse, .dout = dout}, layout, params,
                             {.dq = dq, .dk = dk, .dv = dv});
    for (const Tensor* t : {&dq, &dk, &dv}) runs.push_back(to_device(*t, Device::CPU));
  }
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(std::memcmp(runs[size_t(i)].data(), runs[size_t(i + 3)].data(), size_t(runs[size_t(i)].numel()) * 4), 0)
        << "gradient " << i << " differs between two runs";
}

TEST(CudaAttentionTrain, UnsupportedHeadDimIsAClearError) {
  REQUIRE_CUDA_DEVICE();
  const std::vector<AttentionSpan> spans{{0, 16}};
  const DenseAttentionLayout layout{.spans = spans};
  const DenseAttentionParams params{.n_heads = 2, .n_kv_heads = 1, .head_dim = 80, .scale = 0.1f};
  Tensor q = zeros(DType::F32, {16, 160}, Device::CUDA), kv = zeros(DType::F32, {16, 80}, Device::CUDA);
  Tensor out = zeros(DType::F32, {16, 160}, Device::CUDA), lse = zeros(DType::F32, {16, 2}, Device::CUDA);
  try {
    dense_attention({.q = q, .k = kv, .v = kv}, layout, params, out, lse);
    FAIL() << "head_dim 80 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 80"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("64 or 128"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- bench
// Not a test (no timed assertions): run on the GPU machine with
//   test_backend --gtest_also_run_disabled_tests --gtest_filter='CudaAttentionTrainBench.*'
// Useful work counts only visible (i, j) pairs: forward 4·d per pair per
// head (Q·Kᵀ, P·V), backward 10·d (5 products; the dq pass recomputes 2
// more, not counted).

// Visible pairs of a [prompt; chosen; rejected] span (no window).
double visible_pairs(double prompt, double chosen, double rejected) {
  auto tri = [](double x) { return x * (x + 1) / 2; };
  return tri(prompt) + chosen * prompt + tri(chosen) + rejected * prompt + tri(rejected);
}

Tensor bench_rows(int64_t rows, int64_t cols, uint32_t seed, float sigma) {
  Tensor t = Tensor::zeros(DType::F32, {rows, cols});
  uint32_t x = seed * 2654435761u + 1;
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < rows * cols; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = sigma * (float(x >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
  return to_device(t, Device::CUDA);
}

void bench_shape(const char* name, int heads, int kv_heads, int d, int prompt, int chosen, int rejected) {
  AttentionCase c{.name = name, .n_heads = heads, .n_kv_heads = kv_heads, .head_dim = d};
  add_prefix_shared(c, 0, prompt, chosen, rejected);
  const int n = rows_of(c), hd = heads * d, kvd = kv_heads * d;
  const DenseAttentionLayout layout{.spans = c.spans, .branch = c.branch};
  const DenseAttentionParams params{
      .n_heads = heads, .n_kv_heads = kv_heads, .head_dim = d, .scale = 1.0f / std::sqrt(float(d))};
  Tensor q = bench_rows(n, hd, 1, 1.7f), k = bench_rows(n, kvd, 2, 1.7f), v = bench_rows(n, kvd, 3, 1.7f),
         dout = bench_rows(n, hd, 4, 1.0f);
  Tensor out = zeros(DType::F32, {n, hd}, Device::CUDA), lse = zeros(DType::F32, {n, heads}, Device::CUDA);
  Tensor dq = zeros(DType::F32, {n, hd}, Device::CUDA), dk = zeros(DType::F32, {n, kvd}, Device::CUDA),
         dv = zeros(DType::F32, {n, kvd}, Device::CUDA);
  auto time_ms = [&](auto&& fn, int reps) {
    fn();
    synchronize(Device::CUDA);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) fn();
    synchronize(Device::CUDA);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  const double fwd = time_ms([&] { dense_attention({.q = q, .k = k, .v = v}, layout, params, out, lse); }, 10);
  const double bwd = time_ms(
      [&] {
        dense_attention_backward({.q = q, .k = k, .v = v}, {.out = out, .lse = lse, .dout = dout}, layout, params,
                                 {.dq = dq, .dk = dk, .dv = dv});
      },
      10);
  const double pairs = visible_pairs(prompt, chosen, rejected) * heads;
  std::printf("  %-28s rows %6d  forward %8.3f ms %6.1f TFLOP/s   backward %8.3f ms %6.1f TFLOP/s\n", name, n, fwd,
              4.0 * d * pairs / (fwd * 1e9), bwd, 10.0 * d * pairs / (bwd * 1e9));
}

TEST(CudaAttentionTrainBench, DISABLED_Llama8B_2048_4096) {
  REQUIRE_CUDA_DEVICE();
  bench_shape("llama3-8b 2048+4096+4096", 32, 8, 128, 2048, 4096, 4096);
}
TEST(CudaAttentionTrainBench, DISABLED_Llama8B_2048_16384) {
  REQUIRE_CUDA_DEVICE();
  bench_shape("llama3-8b 2048+16384+16384", 32, 8, 128, 2048, 16384, 16384);
}
TEST(CudaAttentionTrainBench, DISABLED_SmolLM2_2048_4096) {
  REQUIRE_CUDA_DEVICE();
  bench_shape("smollm2 2048+4096+4096", 9, 3, 64, 2048, 4096, 4096);
}

}  // namespace
}  // namespace brioche::ops

#else

TEST(CudaAttentionTrain, NotBuilt) { GTEST_SKIP() << "skipped: no CUDA device (built without BRIOCHE_CUDA)"; }

#endif
