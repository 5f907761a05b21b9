// Adapters on Gemma 4 at inference, against peft + transformers
// (tools/oracle/gemma4_lora_oracle.py: the fixture's model with a random
// peft adapter on every projection it has; logits.f32 are the adapted
// model's logits of a 11-token sequence, f64 forward):
//   - merged at load (LoadOptions::adjust_gemma4_checkpoint, what `--adapter`
//     does): every row's logits equal peft's;
//   - served unmerged per request (ServedAdapter, what `serve --lora` does):
//     in one batch with a base-model sequence, the adapted sequence's logits
//     equal those of the model with the f16-rounded factors merged (served
//     factors are f16), and the base sequence's equal the base model's alone.
//     (This adapter moves the logits by ~16, so f16 factors alone put it up
//     to 0.1 from peft's f32 ones.)
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/half.h"
#include "formats/safetensors.h"
#include "model/batch_builder.h"
#include "model/gemma4_weights.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "train/adapter_io.h"
#include "train/gemma4_train_model.h"
#include "train/train_base.h"

namespace brioche::train {
namespace {

using model::testing::BatchBuilder;
using model::testing::BlockPool;
using model::testing::TestSequence;

std::string fixture(const std::string& path) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/gemma4/" + path;
}

struct Golden {
  std::vector<int32_t> ids;
  std::vector<float> logits;  // [ids.size(), vocab]
  int vocab = 0;
};

Golden read_golden(const std::string& name) {
  std::ifstream in(fixture("lora/" + name + "/case.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  Golden g;
  g.ids = j["sequences"][0].get<std::vector<int32_t>>();
  g.vocab = j["vocab"].get<int>();
  g.logits.resize(g.ids.size() * size_t(g.vocab));
  std::ifstream f(fixture("lora/" + name + "/logits.f32"), std::ios::binary);
  f.read(reinterpret_cast<char*>(g.logits.data()), std::streamsize(g.logits.size() * 4));
  EXPECT_TRUE(f.good()) << name;
  return g;
}

// max |logits[first_row + i] − want[i]| over the sequence's rows.
double max_error(const Tensor& logits, int64_t first_row, const std::vector<float>& want, int vocab) {
  double err = 0.0;
  for (size_t i = 0; i < want.size() / size_t(vocab); ++i)
    for (int v = 0; v < vocab; ++v)
      err = std::max(
          err, double(std::abs(logits.row_as<float>(first_row + int64_t(i))[v] - want[i * size_t(vocab) + size_t(v)])));
  return err;
}

// Every row's logits of `ids` (and of a second sequence `other`, with adapter `other_adapter`) in one batch.
Tensor run(model::Model& m, const std::vector<int32_t>& ids, const model::ServedAdapter* adapter,
           const std::vector<int32_t>& other = {}, const model::ServedAdapter* other_adapter = nullptr) {
  model::KvCache kv(m.config(), {.block_size = 4, .n_blocks = 16, .dtype = DType::F32});
  BlockPool pool(16, 3);
  TestSequence a, b;
  std::vector<model::testing::Step> steps{{&a, ids, true}};
  if (!other.empty()) steps.push_back({&b, other, true});
  BatchBuilder batch(steps, pool, kv.block_size());
  batch.batch.sequences[0].adapter = adapter;
  if (!other.empty()) batch.batch.sequences[1].adapter = other_adapter;
  Tensor logits;
  m.forward(batch.batch, kv, logits);
  return logits;
}

class Gemma4Adapter : public ::testing::TestWithParam<std::string> {};

TEST_P(Gemma4Adapter, MergedAtLoadMatchesPeft) {
  const std::string name = GetParam();
  const Golden g = read_golden(name);
  model::LoadOptions options;
  int merged = 0;
  options.adjust_gemma4_checkpoint = [&](model::Gemma4Checkpoint& ck) {
    merged = merge_adapter(
        ck, *load_adapter(fixture("lora/" + name), ck.config.base, false, 1 << 16, gemma4_lora_shapes(ck.config)));
  };
  auto adapted = model::Model::load(fixture(name), options);
  auto base = model::Model::load(fixture(name), {});
  EXPECT_GT(merged, 0);
  const double err = max_error(run(*adapted, g.ids, nullptr), 0, g.logits, g.vocab);
  const double moved = max_error(run(*base, g.ids, nullptr), 0, g.logits, g.vocab);
  std::printf("%s merged: %d projections, largest logit error %.2e (the base model is %.3g away)\n", name.c_str(),
              merged, err, moved);
  EXPECT_LT(err, 1e-3);
  EXPECT_GT(moved, 0.1) << "the adapter changes the outputs";
}

TEST_P(Gemma4Adapter, ServedPerRequestMatchesPeftBesideTheBase) {
  const std::string name = GetParam();
  const Golden g = read_golden(name);
  auto m = model::Model::load(fixture(name), {});
  auto adapter = serving_adapter(
      *load_adapter(fixture("lora/" + name), m->config(), false, 1 << 16, lora_shapes_of(*m)), Device::CPU);
  // The same adapter with its factors rounded to f16 (s = 2 is exact), merged.
  model::LoadOptions options;
  options.adjust_gemma4_checkpoint = [&](model::Gemma4Checkpoint& ck) {
    auto rounded = load_adapter(fixture("lora/" + name), ck.config.base, false, 1 << 16, gemma4_lora_shapes(ck.config));
    for (Tensor* t : {&rounded->flat().a, &rounded->flat().b})
      for (int64_t i = 0; i < t->numel(); ++i) t->data_as<float>()[i] = f16_to_f32(f32_to_f16(t->data_as<float>()[i]));
    merge_adapter(ck, *rounded);
  };
  auto merged_f16 = model::Model::load(fixture(name), options);
  const Tensor want = run(*merged_f16, g.ids, nullptr);
  const std::vector<float> want_rows(want.data_as<float>(), want.data_as<float>() + want.numel());
  const Tensor alone = run(*m, g.ids, nullptr);
  const Tensor mixed = run(*m, g.ids, adapter.get(), g.ids, nullptr);
  const double err = max_error(mixed, 0, want_rows, g.vocab), peft_err = max_error(mixed, 0, g.logits, g.vocab);
  std::vector<float> base_rows(alone.data_as<float>(), alone.data_as<float>() + alone.numel());
  const double base_err = max_error(mixed, int64_t(g.ids.size()), base_rows, g.vocab);
  std::printf(
      "%s served: largest logit error %.2e against the f16 factors merged (%.2e against peft's f32); base rows "
      "beside it differ by %.2e\n",
      name.c_str(), err, peft_err, base_err);
  EXPECT_LT(err, 1e-3);
  EXPECT_LT(peft_err, 0.2);
  EXPECT_LT(base_err, 1e-5);
}

TEST(Gemma4AdapterLoad, AnAdapterForAProjectionTheLayerLacksIsRefused) {
  // peft's mix adapter has no v_proj on the full layers (attention_k_eq_v); an adapter claiming one is refused.
  auto m = model::Model::load(fixture("mix"), {});
  const LoraShapes shapes = lora_shapes_of(*m);
  ASSERT_TRUE(shapes);
  EXPECT_EQ(shapes(1, Module::V).in, 0);
  EXPECT_EQ(shapes(0, Module::V).in, m->config().hidden_size);
}

TEST(Gemma4AttentionBias, BaseModelMatchesTransformers) {
  // tests/fixtures/gemma4/bias: mix's config with attention_bias (q/k/v/o biases), transformers' f64 logits.
  Golden g = read_golden("bias");
  std::ifstream f(fixture("lora/bias/base_logits.f32"), std::ios::binary);
  f.read(reinterpret_cast<char*>(g.logits.data()), std::streamsize(g.logits.size() * 4));
  ASSERT_TRUE(f.good());
  auto m = model::Model::load(fixture("bias"), {});
  const double err = max_error(run(*m, g.ids, nullptr), 0, g.logits, g.vocab);
  std::printf("bias base model: largest logit error %.2e\n", err);
  EXPECT_LT(err, 1e-3);
}

TEST(Gemma4AdapterLoad, MultimodalCheckpointsNameTheLanguageModelsLayers) {
  // peft wraps a Gemma4ForConditionalGeneration's text layers as model.language_model.layers.N: the moe
  // fixture's peft adapter reads (above), and one brioche writes for such a base is named so and targets
  // the text model only (a regex: the towers have q_proj too), back to the same factors.
  const model::Gemma4Checkpoint ck = model::load_gemma4_checkpoint(fixture("moe"));
  ASSERT_TRUE(ck.config.multimodal);
  auto adapter = load_adapter(fixture("lora/moe"), ck.config.base, false, 1 << 16, gemma4_lora_shapes(ck.config));
  const std::string dir = ::testing::TempDir() + "/brioche_gemma4_multimodal_adapter";
  save_adapter(dir, *adapter, ck.config.base, false, {.language_model = true});
  auto file = formats::SafetensorsFile::open(dir + "/adapter_model.safetensors");
  EXPECT_TRUE(file->has("base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.weight"));
  EXPECT_FALSE(file->has("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
  std::ifstream in(dir + "/adapter_config.json");
  const nlohmann::json cfg = nlohmann::json::parse(in);
  ASSERT_TRUE(cfg["target_modules"].is_string()) << cfg.dump();
  EXPECT_EQ(cfg["target_modules"].get<std::string>().rfind(R"(.*language_model\.layers\.)", 0), 0u) << cfg.dump();
  auto again = load_adapter(dir, ck.config.base, false, 1 << 16, gemma4_lora_shapes(ck.config));
  ASSERT_EQ(again->entries().size(), adapter->entries().size());
  for (size_t i = 0; i < adapter->entries().size(); ++i) {
    const Tensor& a = adapter->entries()[i].factors->b;
    const Tensor& b = again->entries()[i].factors->b;
    ASSERT_EQ(a.numel(), b.numel());
    for (int64_t j = 0; j < a.numel(); ++j) ASSERT_EQ(a.data_as<float>()[j], b.data_as<float>()[j]);
  }
}

// moe: a Gemma4ForConditionalGeneration whose peft adapter names model.language_model.layers.
INSTANTIATE_TEST_SUITE_P(Fixtures, Gemma4Adapter, ::testing::Values("mix", "e2b", "bias", "moe"));

}  // namespace
}  // namespace brioche::train
