// Qwen 3.5 on CUDA against the CPU model and transformers' goldens, on the
// random-weight fixtures of tools/oracle/qwen35_oracle.py (dense and MoE;
// layers [linear, full, linear, full]): a 13-row prefill, a 200-token prompt
// in forwards of 77, 64 and 59 rows, a prompt of 50 and 40 greedy decode
// steps across position 64, three sequences of different lengths batched
// with decode rows, and a state checkpoint taken inside a forward and
// continued from. Without a GPU each test reports "skipped: no CUDA device".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "ops/device.h"
#include "require_cuda.h"

namespace brioche::model {
namespace {

std::string fixture_dir(const std::string& name) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/qwen35/" + name;
}

// Sequences run step by step through one model and its cache.
struct Runner {
  Model& model;
  KvCache cache;
  int32_t next_block = 0;

  struct Seq {
    std::vector<int32_t> blocks;
    int32_t n_past = 0;
    int32_t slot = 0;
    std::vector<ops::StateCheckpoint> checkpoints;  // for its next chunk
  };
  struct Chunk {
    Seq* seq;
    std::vector<int32_t> tokens;
    bool all_rows = false;  // logits for every row, else for the last
  };

  Runner(Model& m, Device device)
      : model(m),
        cache(m.config(),
              {.block_size = 16, .n_blocks = 96, .dtype = DType::F32, .device = device, .n_state_slots = 6}) {}

  // One forward over several sequences' chunks; logits [rows wanted, vocab] on the host.
  std::vector<float> step(std::vector<Chunk> chunks) {
    ForwardBatch batch;
    for (Chunk& c : chunks) {
      Seq& s = *c.seq;
      const int32_t end = s.n_past + int32_t(c.tokens.size());
      while (int32_t(s.blocks.size()) * cache.block_size() < end) s.blocks.push_back(next_block++);
      batch.sequences.push_back({.first_row = batch.n_rows(),
                                 .n_rows = int32_t(c.tokens.size()),
                                 .n_past = s.n_past,
                                 .block_table = s.blocks,
                                 .state_slot = s.slot,
                                 .state_checkpoints = s.checkpoints});
      for (size_t i = 0; i < c.tokens.size(); ++i) {
        batch.tokens.push_back(c.tokens[i]);
        batch.positions.push_back(s.n_past + int32_t(i));
        batch.wants_logits.push_back(c.all_rows || i + 1 == c.tokens.size());
      }
    }
    Tensor logits;
    model.forward(batch, cache, logits);
    for (Chunk& c : chunks) {
      c.seq->n_past += int32_t(c.tokens.size());
      c.seq->checkpoints.clear();
    }
    EXPECT_EQ(logits.device(), Device::CPU);
    return std::vector<float>(logits.data_as<float>(), logits.data_as<float>() + logits.numel());
  }
};

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double err = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (!std::isfinite(b[i])) return INFINITY;
    err = std::max(err, std::abs(double(a[i]) - double(b[i])));
  }
  return err;
}

int32_t argmax(const float* row, int64_t n) { return int32_t(std::max_element(row, row + n) - row); }

std::vector<int32_t> token_range(int32_t first, int32_t count, int32_t vocab) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < count; ++i) ids.push_back((first + 37 * i) % vocab);
  return ids;
}

// CUDA against the CPU model (f32 weights and caches): max abs logit error,
// logits std ~0.8. The two differ in summation order (GEMMs, the chunked
// delta rule's products).
constexpr double kTolerance = 2e-4;

class CudaQwen35 : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!ops::cuda_available()) return;
    cpu = Model::load(fixture_dir(GetParam()));
    gpu = Model::load(fixture_dir(GetParam()), {.device = Device::CUDA});
    vocab = int32_t(cpu->config().vocab_size);
    std::ifstream in(fixture_dir(GetParam()) + "/golden.json");
    golden = nlohmann::json::parse(in);
  }
  std::unique_ptr<Model> cpu, gpu;
  int32_t vocab = 0;
  nlohmann::json golden;
};

TEST_P(CudaQwen35, RunsOnTheDevice) {
  REQUIRE_CUDA_DEVICE();
  EXPECT_EQ(gpu->device(), Device::CUDA);
  EXPECT_EQ(cpu->device(), Device::CPU);
}

TEST_P(CudaQwen35, PrefillAndLongPromptMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  Runner a{*cpu, Device::CPU}, b{*gpu, Device::CUDA};
  Runner::Seq sa, sb, la{.slot = 1}, lb{.slot = 1};
  const auto short_ids = golden["short_ids"].get<std::vector<int32_t>>();
  const double prefill = max_abs_diff(a.step({{&sa, short_ids, true}}), b.step({{&sb, short_ids, true}}));
  EXPECT_LT(prefill, kTolerance);
  const auto long_ids = golden["long_ids"].get<std::vector<int32_t>>();
  double long_err = 0;
  size_t pos = 0;
  for (size_t chunk : {77, 64, 59}) {
    std::vector<int32_t> ids(long_ids.begin() + pos, long_ids.begin() + pos + chunk);
    long_err = std::max(long_err, max_abs_diff(a.step({{&la, ids, true}}), b.step({{&lb, ids, true}})));
    pos += chunk;
  }
  EXPECT_LT(long_err, kTolerance);
  std::printf("[ measured ] qwen35 %s cuda vs cpu: 13-row prefill %.2e, 200-token prompt %.2e\n", GetParam().c_str(),
              prefill, long_err);
}

// Prompt of 50 then 40 greedy steps (crossing position 64): transformers'
// greedy ids, and logits close to the CPU model's at every step.
TEST_P(CudaQwen35, GreedyDecodeMatchesTransformersAndCpu) {
  REQUIRE_CUDA_DEVICE();
  Runner a{*cpu, Device::CPU}, b{*gpu, Device::CUDA};
  Runner::Seq sa, sb;
  const auto prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
  const auto expected = golden["greedy_ids"].get<std::vector<int32_t>>();
  std::vector<float> la = a.step({{&sa, prompt}}), lb = b.step({{&sb, prompt}});
  double err = 0;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < expected.size(); ++i) {
    err = std::max(err, max_abs_diff(la, lb));
    ids.push_back(argmax(lb.data(), vocab));
    la = a.step({{&sa, {ids.back()}}});
    lb = b.step({{&sb, {ids.back()}}});
  }
  EXPECT_EQ(ids, expected);
  EXPECT_LT(err, kTolerance);
  std::printf("[ measured ] qwen35 %s cuda vs cpu: greedy decode (40 steps) %.2e\n", GetParam().c_str(), err);
}

// Three sequences in one batch per step: a 100-token prompt in chunks of
// 48 and 52, a 13-token prompt then decode, a 30-token prompt then decode;
// the same batches on both devices.
TEST_P(CudaQwen35, MixedBatchMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  Runner a{*cpu, Device::CPU}, b{*gpu, Device::CUDA};
  Runner::Seq a0{.slot = 2}, a1{.slot = 0}, a2{.slot = 5}, b0{.slot = 2}, b1{.slot = 0}, b2{.slot = 5};
  const std::vector<int32_t> long_ids = token_range(3, 100, vocab), p1 = token_range(11, 13, vocab),
                             p2 = token_range(29, 30, vocab);
  double err = max_abs_diff(a.step({{&a0, {long_ids.begin(), long_ids.begin() + 48}}, {&a1, p1, true}, {&a2, p2}}),
                            b.step({{&b0, {long_ids.begin(), long_ids.begin() + 48}}, {&b1, p1, true}, {&b2, p2}}));
  std::vector<int32_t> next1{5}, next2{7};
  err = std::max(
      err, max_abs_diff(a.step({{&a1, next1}, {&a0, {long_ids.begin() + 48, long_ids.end()}, true}, {&a2, next2}}),
                        b.step({{&b1, next1}, {&b0, {long_ids.begin() + 48, long_ids.end()}, true}, {&b2, next2}})));
  for (int step = 0; step < 20; ++step) {
    const std::vector<float> la = a.step({{&a0, {int32_t(step)}}, {&a1, next1}, {&a2, next2}});
    const std::vector<float> lb = b.step({{&b0, {int32_t(step)}}, {&b1, next1}, {&b2, next2}});
    err = std::max(err, max_abs_diff(la, lb));
    next1 = {argmax(la.data() + vocab, vocab)};
    next2 = {argmax(la.data() + 2 * vocab, vocab)};
  }
  EXPECT_LT(err, kTolerance);
  std::printf("[ measured ] qwen35 %s cuda vs cpu: mixed batch %.2e\n", GetParam().c_str(), err);
}

// A checkpoint of the state at position 32 taken inside a 45-row forward
// (the prefix cache's block-boundary snapshot), and a sequence continued
// from it on the device: the same logits as the CPU model doing the same.
TEST_P(CudaQwen35, StateCheckpointContinuesOnTheDevice) {
  REQUIRE_CUDA_DEVICE();
  Runner a{*cpu, Device::CPU}, b{*gpu, Device::CUDA};
  const std::vector<int32_t> ids = token_range(17, 45, vocab), tail = token_range(50, 9, vocab);
  double err = 0;
  for (Runner* r : {&a, &b}) {
    Runner::Seq s{.slot = 0, .checkpoints = {{32, 4}}};
    r->step({{&s, ids}});
  }
  // The snapshot's continuation: blocks 0 and 1 hold positions 0..31.
  Runner::Seq ca{.blocks = {0, 1}, .n_past = 32, .slot = 4}, cb{.blocks = {0, 1}, .n_past = 32, .slot = 4};
  err = max_abs_diff(a.step({{&ca, tail, true}}), b.step({{&cb, tail, true}}));
  EXPECT_LT(err, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaQwen35, ::testing::Values("dense", "moe"));

}  // namespace
}  // namespace brioche::model
