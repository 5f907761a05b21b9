// Decode steps replayed as CUDA graphs against the same steps run eagerly:
// same model, same inputs, two KV caches. Batches shrink and grow across
// row buckets (exact sizes, padded ones through cuBLASLt) and block tables
// outgrow their width bucket, so graphs are recorded, reused and replaced.
//
// Tolerance: the graph pads 10 rows to 12 (cuBLASLt may pick another
// algorithm for the other shape) and sizes attention splits for its bucket's
// longest context, so sums are merged in another order; a last-bit change of
// a K/V value then rounds to f16 (2^-11 relative) in one cache and not the
// other, and such flips add up over steps: logits NMSE < 1e-5 (measured
// ~1e-6 on the H200) and identical greedy ids. A stale input or a graph
// reading reused memory shows up as NMSE 1e-2 or NaN.
// Without a GPU every test reports "skipped: no CUDA device".
#include <gtest/gtest.h>

#if BRIOCHE_CUDA

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "batch_builder.h"
#include "model/device_weights.h"
#include "model/llama.h"
#include "ops/device.h"
#include "tools/gen_model_lib.h"
#include "require_cuda.h"

namespace brioche::model {
namespace {

using testing::BatchBuilder;
using testing::BlockPool;
using testing::Step;
using testing::TestSequence;

const tools::ShapePreset kTiny{"tiny", "llama", 1000, 256, 512, 2, 4, 2, 64, 10000.0f, false, false};

struct DecodeRun {
  KvCache cache;
  BlockPool pool;
  std::vector<TestSequence> seqs;
  DecodeRun(const ModelConfig& c, int n_seqs)
      : cache(c, {.block_size = 16, .n_blocks = 512, .dtype = DType::F16, .device = Device::CUDA}),
        pool(512, 7),
        seqs(size_t(n_seqs)) {}
};

std::vector<float> forward(LlamaModel& m, DecodeRun& run, const std::vector<std::pair<int, std::vector<int32_t>>>& work,
                           bool graphs, bool all_logits = false) {
  std::vector<Step> steps;
  for (const auto& [s, tokens] : work) steps.push_back({&run.seqs[size_t(s)], tokens, all_logits});
  BatchBuilder b(std::move(steps), run.pool, 16);
  setenv("BRIOCHE_CUDA_GRAPHS", graphs ? "1" : "0", 1);
  Tensor logits;
  m.forward(b.batch, run.cache, logits);
  b.commit();
  unsetenv("BRIOCHE_CUDA_GRAPHS");
  return std::vector<float>(logits.data_as<float>(), logits.data_as<float>() + logits.numel());
}

std::vector<int32_t> argmax_rows(const std::vector<float>& logits, int vocab) {
  std::vector<int32_t> ids;
  for (size_t r = 0; r * vocab < logits.size(); ++r) {
    const float* row = logits.data() + r * vocab;
    ids.push_back(int32_t(std::max_element(row, row + vocab) - row));
  }
  return ids;
}

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return num / den;
}

void check_graphs_match_eager(DType dtype) {
  Checkpoint ck = tools::random_checkpoint(kTiny, dtype, 3);
  move_weights(ck, Device::CUDA);
  LlamaModel model(std::move(ck));
  const int vocab = model.config().vocab_size;
  const int n_seqs = 10;
  DecodeRun eager(model.config(), n_seqs), graph(model.config(), n_seqs);

  // Prompts of different lengths (eager in both runs: not decode steps).
  std::vector<std::pair<int, std::vector<int32_t>>> prefill;
  for (int s = 0; s < n_seqs; ++s) {
    std::vector<int32_t> p;
    for (int i = 0; i < 5 + 7 * s; ++i) p.push_back((s * 131 + i * 17) % vocab);
    prefill.push_back({s, p});
  }
  std::vector<int32_t> next = argmax_rows(forward(model, eager, prefill, false), vocab);
  ASSERT_EQ(argmax_rows(forward(model, graph, prefill, true), vocab), next);

  // 10 sequences (bucket 12, padded), then 3 (exact bucket), then 1; the
  // longest grows from 68 to past 128 positions (table width 8 -> 16).
  for (int step = 0; step < 70; ++step) {
    const int live = step < 30 ? 10 : step < 50 ? 3 : 1;
    std::vector<std::pair<int, std::vector<int32_t>>> work;
    for (int s = n_seqs - live; s < n_seqs; ++s) work.push_back({s, {next[size_t(s)]}});
    std::vector<float> ref = forward(model, eager, work, false);
    std::vector<float> got = forward(model, graph, work, true);
    ASSERT_EQ(got.size(), ref.size());
    std::string rows;  // per-row NMSE, for the failure message
    for (size_t r = 0; r * vocab < ref.size(); ++r) {
      const std::vector<float> g(got.begin() + r * vocab, got.begin() + (r + 1) * vocab),
          e(ref.begin() + r * vocab, ref.begin() + (r + 1) * vocab);
      rows += " " + std::to_string(nmse(g, e));
    }
    EXPECT_LT(nmse(got, ref), 1e-5) << "step " << step << " with " << live << " sequences; rows:" << rows;
    std::vector<int32_t> ids_ref = argmax_rows(ref, vocab), ids = argmax_rows(got, vocab);
    ASSERT_EQ(ids, ids_ref) << "step " << step;
    for (size_t i = 0; i < work.size(); ++i) next[size_t(work[i].first)] = ids[i];
  }
  EXPECT_GE(model.n_decode_graphs(), 3u);  // buckets (12, w), (3, w), (1, w), wider tables
}

TEST(CudaDecodeGraph, MatchesEagerBf16) {
  REQUIRE_CUDA_DEVICE();
  check_graphs_match_eager(DType::BF16);
}

TEST(CudaDecodeGraph, MatchesEagerQuantized) {
  REQUIRE_CUDA_DEVICE();
  check_graphs_match_eager(DType::Q4_K);
}

// Verify steps of speculative decoding (a sequence's token and its drafts,
// logits at every row) replayed as graphs against eager steps: each draft
// row must read the keys the rows before it store in the same step. Row
// counts 1..5 per sequence, mixed with one-row sequences, so the buckets are
// recorded and replayed; the tolerance is the decode test's.
TEST(CudaDecodeGraph, VerifyStepsMatchEager) {
  REQUIRE_CUDA_DEVICE();
  Checkpoint ck = tools::random_checkpoint(kTiny, DType::Q4_K, 11);
  move_weights(ck, Device::CUDA);
  LlamaModel model(std::move(ck));
  const int vocab = model.config().vocab_size;
  const int n_seqs = 4;
  DecodeRun eager(model.config(), n_seqs), graph(model.config(), n_seqs);
  std::vector<std::pair<int, std::vector<int32_t>>> prefill;
  for (int s = 0; s < n_seqs; ++s) {
    std::vector<int32_t> p;
    for (int i = 0; i < 9 + 13 * s; ++i) p.push_back((s * 71 + i * 29) % vocab);
    prefill.push_back({s, p});
  }
  forward(model, eager, prefill, false);
  forward(model, graph, prefill, true);
  const size_t graphs_before = model.n_decode_graphs();
  for (int step = 0; step < 24; ++step) {
    std::vector<std::pair<int, std::vector<int32_t>>> work;
    for (int s = 0; s < n_seqs; ++s) {
      const int rows = 1 + (step + s) % 5;  // the step's token and 0..4 drafts
      std::vector<int32_t> tokens;
      for (int i = 0; i < rows; ++i) tokens.push_back((step * 37 + s * 11 + i * 5) % vocab);
      work.push_back({s, tokens});
    }
    std::vector<float> ref = forward(model, eager, work, false, true);
    std::vector<float> got = forward(model, graph, work, true, true);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_LT(nmse(got, ref), 1e-5) << "step " << step;
    ASSERT_EQ(argmax_rows(got, vocab), argmax_rows(ref, vocab)) << "step " << step;
  }
  EXPECT_GT(model.n_decode_graphs(), graphs_before) << "no verify step ran as a graph";
}

// Exactness of speculative verification on CUDA (docs/speculative.md): a
// verify step (a sequence's token and its drafts, 2–6 rows, here beside
// another sequence's decode row) must give each row the logits, to the
// bit, of decoding that position alone, eagerly and in graphs. SmolLM2's
// heads (9 query, 3 KV, head_dim 64) in Q4_1 like the default model;
// contexts from 20 keys to past 512, where a lone row's attention goes from
// merging its splits in the cluster to the combine kernel while the verify
// launch, sized for its longest row, already uses the combine kernel.
TEST(CudaDecodeGraph, VerifyRowsHaveDecodeBits) {
  REQUIRE_CUDA_DEVICE();
  const tools::ShapePreset smol{"smol", "llama", 1000, 576, 1536, 2, 9, 3, 64, 100000.0f, true, false};
  Checkpoint ck = tools::random_checkpoint(smol, DType::Q4_1, 17);
  move_weights(ck, Device::CUDA);
  LlamaModel model(std::move(ck));
  const int vocab = model.config().vocab_size;
  for (bool graphs : {false, true}) {
    for (const int prompt : {20, 100, 250, 509}) {
      const int rows = 2 + prompt % 5;  // the token and 1..5 drafts
      std::vector<int32_t> p, q, tokens;
      for (int i = 0; i < prompt; ++i) p.push_back((i * 37 + 5) % vocab);
      for (int i = 0; i < 30; ++i) q.push_back((i * 11 + 3) % vocab);
      for (int i = 0; i < rows; ++i) tokens.push_back((i * 101 + prompt) % vocab);

      DecodeRun alone(model.config(), 1), verify(model.config(), 2);
      forward(model, alone, {{0, p}}, false);
      forward(model, verify, {{0, p}, {1, q}}, false);
      std::vector<float> decoded;  // row i: position prompt + i decoded alone
      for (int32_t t : tokens) {
        const std::vector<float> l = forward(model, alone, {{0, {t}}}, graphs);
        decoded.insert(decoded.end(), l.begin(), l.end());
      }
      const std::vector<float> verified = forward(model, verify, {{0, tokens}, {1, {q.back()}}}, graphs, true);
      ASSERT_EQ(verified.size(), decoded.size() + size_t(vocab));
      for (int i = 0; i < rows; ++i) {
        float worst = 0.0f;
        for (int v = 0; v < vocab; ++v)
          worst = std::max(worst, std::abs(verified[size_t(i) * vocab + v] - decoded[size_t(i) * vocab + v]));
        EXPECT_EQ(std::memcmp(verified.data() + size_t(i) * vocab, decoded.data() + size_t(i) * vocab,
                              size_t(vocab) * sizeof(float)),
                  0)
            << (graphs ? "graphs" : "eager") << ", prompt " << prompt << ", row " << i << " of " << rows
            << ": largest difference " << worst;
      }
    }
  }
}

// A new KV cache (other addresses) drops the recorded graphs.
TEST(CudaDecodeGraph, NewCacheRecordsAgain) {
  REQUIRE_CUDA_DEVICE();
  Checkpoint ck = tools::random_checkpoint(kTiny, DType::BF16, 5);
  move_weights(ck, Device::CUDA);
  LlamaModel model(std::move(ck));
  std::vector<float> first;
  for (int round = 0; round < 2; ++round) {
    auto run = std::make_unique<DecodeRun>(model.config(), 2);
    forward(model, *run, {{0, {1, 2, 3}}, {1, {4, 5}}}, true);
    std::vector<float> last;
    for (int step = 0; step < 4; ++step) last = forward(model, *run, {{0, {7}}, {1, {8}}}, true);
    if (round == 0)
      first = last;
    else
      EXPECT_LT(nmse(last, first), 1e-12) << "the second cache's decode differs from the first's";
  }
}

}  // namespace
}  // namespace brioche::model

#else

TEST(CudaDecodeGraph, NotBuilt) { GTEST_SKIP() << "skipped: no CUDA device (built without BRIOCHE_CUDA)"; }

#endif
