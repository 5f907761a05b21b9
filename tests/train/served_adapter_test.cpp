// Unmerged, per-row LoRA (ops::lora_rows_add through the model's blocks)
// against the merged model (W + s·B·A, train::merge_adapter) on
// transformers' tiny f32 checkpoints: one batch mixes rows of two adapters
// (different ranks and targets, one rsLoRA) and of the base model, over a
// prefill step and a decode step, and every sequence's logits equal what
// the model with its adapter merged (or none) computes for it alone.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "core/half.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/testing_paths.h"
#include "model/batch_builder.h"
#include "ops/device.h"
#include "ops/lora_rows.h"
#include "train/adapter_io.h"
#include "train/lora.h"
#include "train_test_data.h"

namespace brioche::train {
namespace {

using model::testing::BatchBuilder;
using model::testing::BlockPool;
using model::testing::TestSequence;

// Factors exactly representable in f16, the served adapter's storage, and a
// power-of-two scale: the served and the merged model then hold the same
// adapter, and the comparison sees only the arithmetic.
std::unique_ptr<LoraAdapter> random_adapter(const model::ModelConfig& c, LoraConfig lora, uint64_t seed) {
  auto adapter = std::make_unique<LoraAdapter>(c, lora, seed);
  std::mt19937 rng{uint32_t(seed)};
  std::normal_distribution<float> normal(0.0f, 0.2f);
  auto to_f16_grid = [](float v) { return f16_to_f32(f32_to_f16(v)); };
  for (auto& e : adapter->entries()) {
    for (int64_t i = 0; i < e.factors->b.numel(); ++i) e.factors->b.data_as<float>()[i] = to_f16_grid(normal(rng));
    for (int64_t i = 0; i < e.factors->a.numel(); ++i)
      e.factors->a.data_as<float>()[i] = to_f16_grid(e.factors->a.data_as<float>()[i]);
  }
  return adapter;
}

std::shared_ptr<model::Model> merged_model(const std::string& path, const LoraAdapter* adapter) {
  model::LoadOptions options;
  if (adapter) options.adjust_checkpoint = [adapter](model::Checkpoint& ck) { merge_adapter(ck, *adapter); };
  return model::Model::load(path, std::move(options));
}

// The logits of `tokens` run alone through `m` (prefill of all but the last
// token, then one decode row): [2, vocab], the prefill's last row and the decode row.
std::vector<std::vector<float>> alone(model::Model& m, const std::vector<int32_t>& tokens) {
  model::KvCache cache(m.config(), {.block_size = 4, .n_blocks = 32});
  BlockPool pool(32, 7);
  TestSequence seq;
  std::vector<std::vector<float>> rows;
  std::vector<int32_t> prompt(tokens.begin(), tokens.end() - 1);
  for (const std::vector<int32_t>& step : {prompt, std::vector<int32_t>{tokens.back()}}) {
    BatchBuilder b({{&seq, step, false}}, pool, cache.block_size());
    Tensor logits;
    m.forward(b.batch, cache, logits);
    b.commit();
    rows.emplace_back(logits.row_as<float>(0), logits.row_as<float>(0) + logits.dim(1));
  }
  return rows;
}

double max_abs_diff(const float* a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < b.size(); ++i) d = std::max(d, double(std::abs(a[i] - b[i])));
  return d;
}

const std::vector<std::vector<int32_t>> kPrompts = {{3, 17, 5, 9, 1, 22}, {8, 2, 2, 40, 7}, {30, 4, 11, 6, 19, 5, 2},
                                                  {3, 17, 5, 9, 1, 22}};

// Logits [step][sequence] of the four prompts in one batch per step (a
// prefill of all but the last token, then one decode row each), sequence s
// running with adapters[s] (null: the base).
std::vector<std::vector<std::vector<float>>> mixed_batch(model::Model& m,
                                                         const std::vector<const model::ServedAdapter*>& adapters) {
  model::KvCache cache(m.config(), {.block_size = 4, .n_blocks = 64, .device = m.device()});
  BlockPool pool(64, 3);
  std::vector<TestSequence> seqs(kPrompts.size());
  std::vector<std::vector<std::vector<float>>> out;
  for (int step = 0; step < 2; ++step) {
    std::vector<model::testing::Step> steps;
    for (size_t s = 0; s < kPrompts.size(); ++s) {
      const auto& p = kPrompts[s];
      steps.push_back({&seqs[s], step == 0 ? std::vector<int32_t>(p.begin(), p.end() - 1) : std::vector<int32_t>{p.back()},
                       false});
    }
    BatchBuilder builder(steps, pool, cache.block_size());
    for (size_t s = 0; s < kPrompts.size(); ++s) builder.batch.sequences[s].adapter = adapters[s];
    Tensor logits;  // on the host
    m.forward(builder.batch, cache, logits);
    builder.commit();
    out.emplace_back();
    for (int64_t s = 0; s < logits.dim(0); ++s)
      out.back().emplace_back(logits.row_as<float>(s), logits.row_as<float>(s) + logits.dim(1));
  }
  return out;
}

struct TwoAdapters {
  std::unique_ptr<LoraAdapter> a, b;
  explicit TwoAdapters(const model::ModelConfig& c)
      : a(random_adapter(c, {.rank = 8, .alpha = 16}, 11)),
        b(random_adapter(c, {.rank = 4, .alpha = 8, .rs_lora = true, .targets = {Module::Q, Module::V, Module::Down}},
                         12)) {}
};

class ServedAdapter : public ::testing::TestWithParam<std::string> {};

// Four sequences: A, base, B, A (so A's rows are two runs).
TEST_P(ServedAdapter, MixedBatchEqualsMergedModels) {
  const std::string path = model::golden_path("tiny_" + GetParam());
  auto base = model::Model::load(path);
  TwoAdapters ab(base->config());
  std::shared_ptr<model::ServedAdapter> served_a = serving_adapter(*ab.a, Device::CPU);
  std::shared_ptr<model::ServedAdapter> served_b = serving_adapter(*ab.b, Device::CPU);
  std::shared_ptr<model::Model> merged_a = merged_model(path, ab.a.get()), merged_b = merged_model(path, ab.b.get());
  model::Model* reference[] = {merged_a.get(), base.get(), merged_b.get(), merged_a.get()};

  const auto got = mixed_batch(*base, {served_a.get(), nullptr, served_b.get(), served_a.get()});
  for (int step = 0; step < 2; ++step) {
    for (size_t s = 0; s < kPrompts.size(); ++s) {
      const auto expected = alone(*reference[s], kPrompts[s])[size_t(step)];
      // f32 throughout; the merged weight rounds W + s·B·A once more.
      EXPECT_LT(max_abs_diff(got[size_t(step)][s].data(), expected), 2e-4) << "sequence " << s << " step " << step;
    }
  }
  // The adapters do change the model (the comparison above is not vacuous).
  EXPECT_GT(max_abs_diff(alone(*merged_a, kPrompts[0])[1].data(), alone(*base, kPrompts[0])[1]), 1e-2);
}

// The same mixed batch on the GPU (the shrink/expand kernels, the adapted
// blocks without the decode graphs) against the CPU.
TEST(CudaServedAdapter, MixedBatchMatchesTheCpu) {
  if (!ops::cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  // head_dim 64: CUDA's paged attention takes 64, 128 or 256 (tiny_llama has 16).
  const std::string path = std::string(BRIOCHE_BINARY_DIR) + "/served_adapter_tiny_d64.gguf";
  tools::write_gguf(tiny_d64_checkpoint(), path);
  auto cpu = model::Model::load(path);
  auto gpu = model::Model::load(path, {.device = Device::CUDA});
  TwoAdapters ab(cpu->config());
  auto a_cpu = serving_adapter(*ab.a, Device::CPU), b_cpu = serving_adapter(*ab.b, Device::CPU);
  auto a_gpu = serving_adapter(*ab.a, Device::CUDA), b_gpu = serving_adapter(*ab.b, Device::CUDA);
  const auto want = mixed_batch(*cpu, {a_cpu.get(), nullptr, b_cpu.get(), a_cpu.get()});
  const auto got = mixed_batch(*gpu, {a_gpu.get(), nullptr, b_gpu.get(), a_gpu.get()});
  for (size_t step = 0; step < 2; ++step)
    for (size_t s = 0; s < kPrompts.size(); ++s)
      EXPECT_LT(max_abs_diff(got[step][s].data(), want[step][s]), 2e-3) << "sequence " << s << " step " << step;
}

INSTANTIATE_TEST_SUITE_P(Tiny, ServedAdapter, ::testing::Values("llama", "qwen3"));

TEST(LoraRowsAdd, RefusesOverlappingSegmentsAndWrongShapes) {
  Tensor x = Tensor::zeros(DType::F32, {4, 6}), y = Tensor::zeros(DType::F32, {4, 5}),
         u = Tensor::zeros(DType::F32, {4, 2});
  Tensor a = Tensor::zeros(DType::F16, {2, 6}), bt = Tensor::zeros(DType::F16, {2, 5}),
         wrong = Tensor::zeros(DType::F16, {2, 7}), f32 = Tensor::zeros(DType::F32, {2, 6});
  const ops::LoraRows overlapping[] = {{0, 3, &a, &bt}, {2, 2, &a, &bt}};
  EXPECT_THROW(ops::lora_rows_add(x, overlapping, y, u), Error);
  const ops::LoraRows outside[] = {{3, 2, &a, &bt}};
  EXPECT_THROW(ops::lora_rows_add(x, outside, y, u), Error);
  const ops::LoraRows shape[] = {{0, 2, &wrong, &bt}};
  EXPECT_THROW(ops::lora_rows_add(x, shape, y, u), Error);
  const ops::LoraRows dtype[] = {{0, 2, &f32, &bt}};
  EXPECT_THROW(ops::lora_rows_add(x, dtype, y, u), Error);
  const ops::LoraRows fine[] = {{0, 2, &a, &bt}, {2, 2, &a, &bt}};
  EXPECT_NO_THROW(ops::lora_rows_add(x, fine, y, u));
}

}  // namespace
}  // namespace brioche::train
