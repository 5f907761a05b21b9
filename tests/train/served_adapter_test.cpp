// Unmerged, per-row LoRA (ops::lora_rows_add through the model's blocks)
// against the merged model (W + s·B·A, train::merge_adapter) on
// transformers' tiny f32 checkpoints: one batch mixes rows of two adapters
// (different ranks and targets, one rsLoRA) and of the base model, over a
// prefill step and a decode step, and every sequence's logits equal what
// the model with its adapter merged (or none) computes for it alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/lora_rows.h"
#include "core/error.h"
#include "core/half.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/llama.h"
#include "model/model.h"
#include "model/testing_paths.h"
#include "model/batch_builder.h"
#include "ops/device.h"
#include "ops/device_graph.h"
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

const std::vector<std::vector<int32_t>> kPrompts = {
    {3, 17, 5, 9, 1, 22}, {8, 2, 2, 40, 7}, {30, 4, 11, 6, 19, 5, 2}, {3, 17, 5, 9, 1, 22}};

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
      steps.push_back(
          {&seqs[s], step == 0 ? std::vector<int32_t>(p.begin(), p.end() - 1) : std::vector<int32_t>{p.back()}, false});
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

// Decode steps with adapter rows run as CUDA graphs that read the batch's
// adapter table (model/adapter_table.h): three decode steps, each with
// another mix of two adapters and the base over the four sequences (and an
// adapter row in each, so one rank cap), replay the one graph the first
// recorded, and each step's logits match the CPU running the same steps.
TEST(CudaServedAdapter, DecodeGraphReplaysAnyMixOfAdapters) {
  if (!ops::cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  if (!ops::decode_graphs_enabled()) GTEST_SKIP() << "skipped: decode graphs are off (BRIOCHE_CUDA_GRAPHS=0)";
  const std::string path = std::string(BRIOCHE_BINARY_DIR) + "/served_adapter_graph_d64.gguf";
  tools::write_gguf(tiny_d64_checkpoint(), path);
  auto cpu = model::Model::load(path);
  auto gpu = model::Model::load(path, {.device = Device::CUDA});
  auto* llama = dynamic_cast<model::LlamaModel*>(gpu.get());
  ASSERT_NE(llama, nullptr);
  TwoAdapters ab(cpu->config());
  auto a_cpu = serving_adapter(*ab.a, Device::CPU), b_cpu = serving_adapter(*ab.b, Device::CPU);
  auto a_gpu = serving_adapter(*ab.a, Device::CUDA), b_gpu = serving_adapter(*ab.b, Device::CUDA);
  using Mix = std::vector<int>;  // per sequence: 0 base, 1 A, 2 B
  const std::vector<Mix> mixes = {{1, 0, 2, 1}, {2, 2, 0, 1}, {0, 1, 1, 0}, {2, 0, 0, 0}};
  auto run = [&](model::Model& m, const model::ServedAdapter* a, const model::ServedAdapter* b) {
    model::KvCache cache(m.config(), {.block_size = 4, .n_blocks = 64, .device = m.device()});
    BlockPool pool(64, 3);
    std::vector<TestSequence> seqs(kPrompts.size());
    std::vector<std::vector<std::vector<float>>> out;
    for (size_t step = 0; step < mixes.size(); ++step) {
      std::vector<model::testing::Step> steps;
      for (size_t s = 0; s < kPrompts.size(); ++s) {
        const auto& p = kPrompts[s];
        steps.push_back(
            {&seqs[s],
             step == 0 ? std::vector<int32_t>(p.begin(), p.end() - 1) : std::vector<int32_t>{p[(step + s) % p.size()]},
             false});
      }
      BatchBuilder builder(steps, pool, cache.block_size());
      for (size_t s = 0; s < kPrompts.size(); ++s) {
        const int which = mixes[step][s];
        builder.batch.sequences[s].adapter = which == 1 ? a : which == 2 ? b : nullptr;
      }
      Tensor logits;
      m.forward(builder.batch, cache, logits);
      builder.commit();
      out.emplace_back();
      for (int64_t s = 0; s < logits.dim(0); ++s)
        out.back().emplace_back(logits.row_as<float>(s), logits.row_as<float>(s) + logits.dim(1));
    }
    return out;
  };
  const auto want = run(*cpu, a_cpu.get(), b_cpu.get());
  const auto got = run(*gpu, a_gpu.get(), b_gpu.get());
  // Step 0 is a prefill (eager); steps 1–3 are decode steps of one bucket.
  EXPECT_EQ(llama->n_decode_graphs(), 1u);
  for (size_t step = 0; step < mixes.size(); ++step)
    for (size_t s = 0; s < kPrompts.size(); ++s)
      EXPECT_LT(max_abs_diff(got[step][s].data(), want[step][s]), 2e-3) << "sequence " << s << " step " << step;
}

// ops::lora_table_add on the GPU against the CPU's loops: three parts of
// different widths, rows of two slots and the base, a slot that leaves a
// projection alone; rows outside every slot keep y bit for bit.
TEST(CudaLoraTableAdd, MatchesTheCpu) {
  if (!ops::cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  constexpr int64_t kRows = 5, kIn = 96, kRankCap = 8;
  const int64_t outs[3] = {64, 32, 160};
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto f32 = [&](int64_t r, int64_t c) {
    Tensor t = Tensor::zeros(DType::F32, {r, c});
    for (int64_t i = 0; i < r * c; ++i) t.data_as<float>()[i] = normal(rng);
    return t;
  };
  auto f16 = [&](int64_t r, int64_t c) {
    Tensor t = Tensor::zeros(DType::F16, {r, c});
    for (int64_t i = 0; i < r * c; ++i) t.data_as<uint16_t>()[i] = f32_to_f16(0.3f * normal(rng));
    return t;
  };
  // Slot 0: rank 8 on all three parts; slot 1: rank 3 on parts 0 and 2.
  std::vector<Tensor> factors_cpu, factors_gpu;
  const int ranks[2][3] = {{8, 8, 8}, {3, 0, 3}};
  for (int slot = 0; slot < 2; ++slot)
    for (int p = 0; p < 3; ++p) {
      const int r = ranks[slot][p];
      factors_cpu.push_back(r ? f16(r, kIn) : Tensor());
      factors_cpu.push_back(r ? f16(r, outs[p]) : Tensor());
    }
  for (const Tensor& t : factors_cpu) factors_gpu.push_back(t.defined() ? ops::to_device(t, Device::CUDA) : Tensor());
  const std::vector<int32_t> row_slot = {1, -1, 0, 0, 1};
  auto table_words = [&](const std::vector<Tensor>& f) {
    std::vector<backend::cpu::LoraFactors> entries;
    for (int slot = 0; slot < 2; ++slot)
      for (int p = 0; p < 3; ++p) {
        const Tensor& a = f[size_t(slot * 6 + p * 2)];
        const Tensor& bt = f[size_t(slot * 6 + p * 2 + 1)];
        entries.push_back(a.defined() ? backend::cpu::LoraFactors{.a = a.data_as<uint16_t>(),
                                                                  .bt = bt.data_as<uint16_t>(),
                                                                  .rank = int32_t(a.dim(0))}
                                      : backend::cpu::LoraFactors{});
      }
    Tensor words = Tensor::zeros(DType::I32, {int64_t(entries.size() * 6)});
    std::memcpy(words.data(), entries.data(), entries.size() * sizeof(entries[0]));
    return words;
  };
  Tensor slots_cpu = Tensor::zeros(DType::I32, {kRows});
  std::memcpy(slots_cpu.data(), row_slot.data(), row_slot.size() * 4);
  const Tensor words_cpu = table_words(factors_cpu), words_gpu = ops::to_device(table_words(factors_gpu), Device::CUDA);
  const Tensor slots_gpu = ops::to_device(slots_cpu, Device::CUDA);
  const Tensor x = f32(kRows, kIn);
  std::vector<Tensor> y_cpu, y_gpu;
  for (int64_t out : outs) y_cpu.push_back(f32(kRows, out));
  for (const Tensor& y : y_cpu) y_gpu.push_back(ops::to_device(y, Device::CUDA));
  Tensor u_cpu = Tensor::zeros(DType::F32, {kRows, 3 * kRankCap});
  Tensor u_gpu = ops::to_device(u_cpu, Device::CUDA);
  const Tensor x_gpu = ops::to_device(x, Device::CUDA);
  auto parts = [](std::vector<Tensor>& ys) {
    return std::vector<ops::LoraTablePart>{
        {.entry = 0, .y = &ys[0]}, {.entry = 1, .y = &ys[1]}, {.entry = 2, .y = &ys[2]}};
  };
  const ops::LoraTable t_cpu{.row_slot = &slots_cpu, .factors = &words_cpu, .slot_stride = 3, .rank_cap = kRankCap};
  const ops::LoraTable t_gpu{.row_slot = &slots_gpu, .factors = &words_gpu, .slot_stride = 3, .rank_cap = kRankCap};
  auto clone = [](const Tensor& t) {
    Tensor c = Tensor::zeros(t.dtype(), {t.dim(0), t.dim(1)});
    std::memcpy(c.data(), t.data(), t.nbytes());
    return c;
  };
  const std::vector<Tensor> y_base = {clone(y_cpu[0]), clone(y_cpu[1]), clone(y_cpu[2])};
  ops::lora_table_add(x, t_cpu, parts(y_cpu), u_cpu);
  ops::lora_table_add(x_gpu, t_gpu, parts(y_gpu), u_gpu);
  for (int p = 0; p < 3; ++p) {
    const Tensor got = ops::to_device(y_gpu[size_t(p)], Device::CPU);
    double diff = 0, change = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      diff = std::max(diff, double(std::abs(got.data_as<float>()[i] - y_cpu[size_t(p)].data_as<float>()[i])));
      change = std::max(change,
                        double(std::abs(y_cpu[size_t(p)].data_as<float>()[i] - y_base[size_t(p)].data_as<float>()[i])));
    }
    EXPECT_LT(diff, 1e-4) << "part " << p;
    EXPECT_GT(change, 1e-2) << "part " << p;  // the update is not vacuous
    // Row 1 (no slot) is untouched.
    for (int64_t c = 0; c < got.dim(1); ++c)
      ASSERT_EQ(got.row_as<float>(1)[c], y_base[size_t(p)].row_as<float>(1)[c]) << "part " << p;
  }
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
