// Paged attention against a naive double reference over contiguous K/V:
// GQA, ragged sequences mixing prefill and decode, shuffled block tables,
// block sizes that do not divide the lengths, f16 caches, sliding windows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string_view>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "ops/attention.h"

namespace brioche {
namespace {

struct Case {
  int n_heads, n_kv_heads, head_dim, block_size;
  DType cache_dtype;
  int sliding_window;
  std::vector<std::pair<int, int>> seqs;  // (n_past, n_rows)
};

void expect_matches_reference(const Case& c, const std::vector<ops::AttentionSequence>& seqs,
                              const std::vector<std::vector<float>>& hist_k,
                              const std::vector<std::vector<float>>& hist_v, const Tensor& q, const Tensor& out,
                              float scale, std::string_view isa);

void run_case(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int kv_dim = c.n_kv_heads * c.head_dim, q_dim = c.n_heads * c.head_dim;

  // Every sequence's full K/V history [len, kv_dim], and its block table.
  int total_blocks = 0;
  std::vector<int> lens;
  for (auto [past, rows] : c.seqs) {
    lens.push_back(past + rows);
    total_blocks += (past + rows + c.block_size - 1) / c.block_size;
  }
  std::vector<int32_t> ids(total_blocks + 3);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  int n_blocks = int(ids.size());
  Tensor kc = Tensor::zeros(c.cache_dtype, {n_blocks, c.block_size, c.n_kv_heads, c.head_dim});
  Tensor vc = Tensor::zeros(c.cache_dtype, {n_blocks, c.block_size, c.n_kv_heads, c.head_dim});

  std::vector<std::vector<float>> hist_k, hist_v;
  std::vector<std::vector<int32_t>> tables;
  int next_block = 0, n_rows = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    std::vector<float> k(size_t(lens[s]) * kv_dim), v(size_t(lens[s]) * kv_dim);
    for (auto& x : k) x = dist(rng);
    for (auto& x : v) x = dist(rng);
    if (c.cache_dtype == DType::F16) {  // the reference sees what the cache can hold
      for (auto& x : k) x = f16_to_f32(f32_to_f16(x));
      for (auto& x : v) x = f16_to_f32(f32_to_f16(x));
    }
    hist_k.push_back(k);
    hist_v.push_back(v);
    int nb = (lens[s] + c.block_size - 1) / c.block_size;
    tables.emplace_back(ids.begin() + next_block, ids.begin() + next_block + nb);
    next_block += nb;
    n_rows += c.seqs[s].second;
  }

  // Past positions go into the cache through store_kv as one earlier batch.
  std::vector<ops::AttentionSequence> past_seqs, seqs;
  int past_rows = 0, row = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    past_seqs.push_back({past_rows, c.seqs[s].first, 0, tables[s]});
    past_rows += c.seqs[s].first;
    seqs.push_back({row, c.seqs[s].second, c.seqs[s].first, tables[s]});
    row += c.seqs[s].second;
  }
  Tensor pk = Tensor::zeros(DType::F32, {std::max(past_rows, 1), kv_dim});
  Tensor pv = Tensor::zeros(DType::F32, {std::max(past_rows, 1), kv_dim});
  Tensor nk = Tensor::zeros(DType::F32, {n_rows, kv_dim});
  Tensor nv = Tensor::zeros(DType::F32, {n_rows, kv_dim});
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    for (int p = 0; p < lens[s]; ++p) {
      bool past = p < c.seqs[s].first;
      int r = past ? past_seqs[s].first_row + p : seqs[s].first_row + p - c.seqs[s].first;
      float* kd = (past ? pk : nk).row_as<float>(r);
      float* vd = (past ? pv : nv).row_as<float>(r);
      std::copy_n(&hist_k[s][size_t(p) * kv_dim], kv_dim, kd);
      std::copy_n(&hist_v[s][size_t(p) * kv_dim], kv_dim, vd);
    }
  }
  if (past_rows > 0) ops::store_kv(pk.slice(0, 0, past_rows), pv.slice(0, 0, past_rows), past_seqs, kc, vc);
  ops::store_kv(nk, nv, seqs, kc, vc);

  Tensor q = Tensor::zeros(DType::F32, {n_rows, q_dim});
  for (int64_t i = 0; i < q.numel(); ++i) q.data_as<float>()[i] = dist(rng);
  float scale = 1.0f / std::sqrt(float(c.head_dim));
  // Every instruction set's kernels: AVX2, and AVX-512 where the CPU has it.
  for (cpu::Isa isa : cpu::available_isas()) {
    if (isa == cpu::Isa::Scalar) continue;  // attention has no scalar-only path
    cpu::set_isa_override(isa);
    Tensor out = Tensor::zeros(DType::F32, {n_rows, q_dim});
    ops::paged_attention(q, {.k = kc, .v = vc, .sequences = seqs},
                         {.n_heads = c.n_heads,
                          .n_kv_heads = c.n_kv_heads,
                          .head_dim = c.head_dim,
                          .scale = scale,
                          .sliding_window = c.sliding_window},
                         out);
    cpu::clear_isa_override();
    expect_matches_reference(c, seqs, hist_k, hist_v, q, out, scale, cpu::isa_name(isa));
  }
}

void expect_matches_reference(const Case& c, const std::vector<ops::AttentionSequence>& seqs,
                              const std::vector<std::vector<float>>& hist_k,
                              const std::vector<std::vector<float>>& hist_v, const Tensor& q, const Tensor& out,
                              float scale, std::string_view isa) {
  const int kv_dim = c.n_kv_heads * c.head_dim;

  const int group = c.n_heads / c.n_kv_heads;
  double max_err = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    for (int i = 0; i < c.seqs[s].second; ++i) {
      int r = seqs[s].first_row + i, pos = c.seqs[s].first + i;
      int lo = c.sliding_window > 0 ? std::max(0, pos - c.sliding_window + 1) : 0;
      for (int h = 0; h < c.n_heads; ++h) {
        int kvh = h / group;
        const float* qh = q.row_as<float>(r) + h * c.head_dim;
        std::vector<double> w;
        double max = -INFINITY;
        for (int j = lo; j <= pos; ++j) {
          double dot = 0;
          for (int e = 0; e < c.head_dim; ++e)
            dot += double(qh[e]) * hist_k[s][size_t(j) * kv_dim + kvh * c.head_dim + e];
          w.push_back(dot * scale);
          max = std::max(max, w.back());
        }
        double sum = 0;
        for (auto& x : w) sum += (x = std::exp(x - max));
        for (int e = 0; e < c.head_dim; ++e) {
          double want = 0;
          for (int j = lo; j <= pos; ++j)
            want += w[j - lo] / sum * hist_v[s][size_t(j) * kv_dim + kvh * c.head_dim + e];
          double got = out.row_as<float>(r)[h * c.head_dim + e];
          max_err = std::max(max_err, std::abs(got - want));
        }
      }
    }
  }
  EXPECT_LT(max_err, 2e-5) << "heads " << c.n_heads << "/" << c.n_kv_heads << " d " << c.head_dim << " block "
                           << c.block_size << " " << isa;
}

TEST(PagedAttention, SingleSequencePrefill) { run_case({4, 4, 8, 16, DType::F32, 0, {{0, 37}}}, 1); }

TEST(PagedAttention, GqaRaggedMixedPrefillDecode) {
  run_case({6, 2, 20, 3, DType::F32, 0, {{0, 11}, {9, 1}, {4, 7}, {0, 1}, {31, 1}}}, 2);
}

TEST(PagedAttention, DecodeManySequences) {
  std::vector<std::pair<int, int>> seqs;
  for (int s = 0; s < 9; ++s) seqs.push_back({5 * s + 2, 1});
  run_case({9, 3, 64, 16, DType::F32, 0, seqs}, 3);
}

TEST(PagedAttention, F16Cache) { run_case({4, 1, 32, 5, DType::F16, 0, {{7, 13}, {0, 3}, {20, 1}}}, 4); }

// Full 16-slot blocks take the CPU's 8-keys-at-a-time scoring path, for both
// cache types (the cases above mostly exercise its scalar tail).
TEST(PagedAttention, F16CacheFullBlocksDecodeAndPrefill) {
  run_case({6, 2, 64, 16, DType::F16, 0, {{40, 1}, {0, 33}, {16, 1}, {71, 2}}}, 6);
}

// Long rows (hundreds of keys in one softmax), head_dim 128 and 80 (the
// AVX-512 value loop's 64-wide and 16-wide slices), partial last blocks.
TEST(PagedAttention, LongRowsWideAndOddHeads) {
  run_case({8, 2, 128, 16, DType::F32, 0, {{300, 1}, {0, 40}, {517, 1}}}, 7);
  run_case({5, 1, 80, 16, DType::F16, 0, {{250, 1}, {33, 3}}}, 8);
}

TEST(PagedAttention, SlidingWindow) { run_case({2, 1, 16, 4, DType::F32, 5, {{10, 9}, {0, 12}, {3, 1}}}, 5); }

TEST(PagedAttention, RejectsShortBlockTable) {
  Tensor kc = Tensor::zeros(DType::F32, {4, 4, 1, 8});
  Tensor vc = Tensor::zeros(DType::F32, {4, 4, 1, 8});
  Tensor k = Tensor::zeros(DType::F32, {6, 8});
  std::vector<int32_t> table = {2};  // 6 positions need 2 blocks
  std::vector<ops::AttentionSequence> seqs = {{0, 6, 0, table}};
  EXPECT_THROW(ops::store_kv(k, k, seqs, kc, vc), Error);
  std::vector<int32_t> bad = {0, 7};
  seqs = {{0, 6, 0, bad}};
  EXPECT_THROW(ops::store_kv(k, k, seqs, kc, vc), Error);
}

}  // namespace
}  // namespace brioche
