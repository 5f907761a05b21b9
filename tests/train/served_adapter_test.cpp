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
#include "ops/lora_rows.h"
#include "train/adapter_io.h"
#include "train/lora.h"

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

class ServedAdapter : public ::testing::TestWithParam<std::string> {};

TEST_P(ServedAdapter, MixedBatchEqualsMergedModels) {
  const std::string path = model::golden_path("tiny_" + GetParam());
  auto base = model::Model::load(path);
  const model::ModelConfig& c = base->config();
  auto a = random_adapter(c, {.rank = 8, .alpha = 16}, 11);
  auto b = random_adapter(c, {.rank = 4, .alpha = 8, .rs_lora = true, .targets = {Module::Q, Module::V, Module::Down}},
                          12);
  std::shared_ptr<model::ServedAdapter> served_a = serving_adapter(*a, Device::CPU);
  std::shared_ptr<model::ServedAdapter> served_b = serving_adapter(*b, Device::CPU);

  // Four sequences: A, base, B, A (so A's rows are two runs).
  const std::vector<std::vector<int32_t>> prompts = {{3, 17, 5, 9, 1, 22}, {8, 2, 2, 40, 7}, {30, 4, 11, 6, 19, 5, 2},
                                                     {3, 17, 5, 9, 1, 22}};
  const model::ServedAdapter* adapters[] = {served_a.get(), nullptr, served_b.get(), served_a.get()};
  std::shared_ptr<model::Model> merged_a = merged_model(path, a.get()), merged_b = merged_model(path, b.get());
  model::Model* reference[] = {merged_a.get(), base.get(), merged_b.get(), merged_a.get()};

  model::KvCache cache(c, {.block_size = 4, .n_blocks = 64});
  BlockPool pool(64, 3);
  std::vector<TestSequence> seqs(prompts.size());
  for (int step = 0; step < 2; ++step) {
    std::vector<model::testing::Step> steps;
    for (size_t s = 0; s < prompts.size(); ++s) {
      const auto& p = prompts[s];
      steps.push_back({&seqs[s], step == 0 ? std::vector<int32_t>(p.begin(), p.end() - 1) : std::vector<int32_t>{p.back()},
                       false});
    }
    BatchBuilder builder(steps, pool, cache.block_size());
    for (size_t s = 0; s < prompts.size(); ++s) builder.batch.sequences[s].adapter = adapters[s];
    Tensor logits;
    base->forward(builder.batch, cache, logits);
    builder.commit();
    for (size_t s = 0; s < prompts.size(); ++s) {
      const auto expected = alone(*reference[s], prompts[s])[size_t(step)];
      // f32 throughout; the merged weight rounds W + s·B·A once more.
      EXPECT_LT(max_abs_diff(logits.row_as<float>(int64_t(s)), expected), 2e-4) << "sequence " << s << " step " << step;
    }
  }
  // The adapters do change the model (the comparison above is not vacuous).
  EXPECT_GT(max_abs_diff(alone(*merged_a, prompts[0])[1].data(), alone(*base, prompts[0])[1]), 1e-2);
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
