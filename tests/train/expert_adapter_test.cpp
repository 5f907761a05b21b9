// Adapters with LoRA on the MoE experts (peft's target_parameters
// experts.gate_up_proj / experts.down_proj) and Qwen 3.5's shared expert, at
// inference and on disk, against peft (tools/oracle/{gemma4,qwen35}_lora_oracle.py,
// lora/moe_experts: the moe fixture with a random non-zero adapter on every
// projection and both expert parameters; logits.f32 are peft's adapted
// logits of the case's first sequence, f64 forward):
//   - merged at load (what `--adapter DIR` does): the logits equal peft's;
//   - written by brioche: the same tensor names, shapes and values as peft's
//     file (peft's nested ParamWrapper names), and target_parameters in
//     adapter_config.json; read back equal;
//   - what is not supported is refused naming it: LoRA dropout on the
//     experts, an unknown target_parameters entry, expert tensors without
//     target_parameters. (Served unmerged: served_expert_adapter_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/safetensors.h"
#include "model/batch_builder.h"
#include "model/gemma4_weights.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/qwen35_weights.h"
#include "ops/scaled_add.h"
#include "train/adapter_io.h"
#include "train/gemma4_train_model.h"
#include "train/qwen35_train_model.h"

namespace brioche::train {
namespace {

using model::testing::BatchBuilder;
using model::testing::BlockPool;
using model::testing::TestSequence;

std::string fixture(const std::string& family, const std::string& path) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/" + family + "/" + path;
}

struct Golden {
  std::vector<int32_t> ids;
  std::vector<float> logits;  // [ids.size(), vocab]
  int vocab = 0;
};

Golden read_golden(const std::string& family) {
  std::ifstream in(fixture(family, "lora/moe_experts/case.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  Golden g;
  g.ids = j["sequences"][0].get<std::vector<int32_t>>();
  g.vocab = j["vocab"].get<int>();
  g.logits.resize(g.ids.size() * size_t(g.vocab));
  std::ifstream f(fixture(family, "lora/moe_experts/logits.f32"), std::ios::binary);
  f.read(reinterpret_cast<char*>(g.logits.data()), std::streamsize(g.logits.size() * 4));
  EXPECT_TRUE(f.good()) << family;
  return g;
}

// max |logits of ids − want| over every row.
double max_error(model::Model& m, const Golden& g) {
  model::KvCache kv(m.config(), {.block_size = 4, .n_blocks = 64, .dtype = DType::F32, .n_state_slots = 2});
  BlockPool pool(64, 3);
  TestSequence a;
  BatchBuilder batch({{&a, g.ids, true}}, pool, kv.block_size());
  batch.batch.sequences[0].state_slot = 0;  // (hybrid models keep a recurrent state per sequence)
  Tensor logits;
  m.forward(batch.batch, kv, logits);
  double err = 0.0;
  for (size_t i = 0; i < g.ids.size(); ++i)
    for (int v = 0; v < g.vocab; ++v)
      err = std::max(err, double(std::abs(logits.row_as<float>(int64_t(i))[v] - g.logits[i * size_t(g.vocab) + v])));
  return err;
}

// The adapter of lora/moe_experts for the family's moe fixture, with that model's shapes.
std::unique_ptr<LoraAdapter> peft_adapter(const std::string& family, model::ModelConfig& config, LoraShapes& shapes) {
  if (family == "gemma4") {
    const model::Gemma4Checkpoint ck = model::load_gemma4_checkpoint(fixture(family, "moe"));
    config = ck.config.base, shapes = gemma4_lora_shapes(ck.config);
  } else {
    const model::Qwen35Checkpoint ck = model::load_qwen35_checkpoint(fixture(family, "moe"));
    config = ck.config, shapes = qwen35_lora_shapes(ck);
  }
  return load_adapter(fixture(family, "lora/moe_experts"), config, false, 1 << 16, shapes);
}

class ExpertAdapter : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertAdapter, MergedAtLoadMatchesPeft) {
  const std::string family = GetParam();
  const Golden g = read_golden(family);
  model::LoadOptions options;
  int merged = 0;
  options.adjust_gemma4_checkpoint = [&](model::Gemma4Checkpoint& ck) {
    merged = merge_adapter(ck, *load_adapter(fixture(family, "lora/moe_experts"), ck.config.base, false, 1 << 16,
                                             gemma4_lora_shapes(ck.config)));
  };
  options.adjust_qwen35_checkpoint = [&](model::Qwen35Checkpoint& ck) {
    merged = merge_adapter(
        ck, *load_adapter(fixture(family, "lora/moe_experts"), ck.config, false, 1 << 16, qwen35_lora_shapes(ck)));
  };
  auto adapted = model::Model::load(fixture(family, "moe"), options);
  auto base = model::Model::load(fixture(family, "moe"), {});
  const double err = max_error(*adapted, g), moved = max_error(*base, g);
  // Without the experts' factors merged, the logits stay this far from peft's.
  model::LoadOptions no_experts;
  no_experts.adjust_gemma4_checkpoint = [&](model::Gemma4Checkpoint& ck) {
    auto a = load_adapter(fixture(family, "lora/moe_experts"), ck.config.base, false, 1 << 16,
                          gemma4_lora_shapes(ck.config));
    for (auto& e : a->entries())
      if (is_expert_module(e.module)) ops::fill(e.factors->b, 0.0f);
    merge_adapter(ck, *a);
  };
  no_experts.adjust_qwen35_checkpoint = [&](model::Qwen35Checkpoint& ck) {
    auto a = load_adapter(fixture(family, "lora/moe_experts"), ck.config, false, 1 << 16, qwen35_lora_shapes(ck));
    for (auto& e : a->entries())
      if (is_expert_module(e.module)) ops::fill(e.factors->b, 0.0f);
    merge_adapter(ck, *a);
  };
  auto partial = model::Model::load(fixture(family, "moe"), no_experts);
  const double without = max_error(*partial, g);
  std::printf(
      "%s moe_experts merged: %d projections, largest logit error %.2e (base %.3g away, without the "
      "experts' factors %.3g)\n",
      family.c_str(), merged, err, moved, without);
  EXPECT_LT(err, 1e-3);
  EXPECT_GT(without, 1e-2) << "the experts' factors change the outputs";
}

TEST_P(ExpertAdapter, WrittenAsPeftWritesIt) {
  const std::string family = GetParam();
  model::ModelConfig config;
  LoraShapes shapes;
  auto adapter = peft_adapter(family, config, shapes);
  const std::string dir = ::testing::TempDir() + "/h14_expert_adapter_" + family;
  std::filesystem::remove_all(dir);
  save_adapter(dir, *adapter, config, false, {.language_model = family == "gemma4"});
  auto theirs = formats::SafetensorsFile::open(fixture(family, "lora/moe_experts/adapter_model.safetensors"));
  auto ours = formats::SafetensorsFile::open(dir + "/adapter_model.safetensors");
  ASSERT_EQ(ours->tensors().size(), theirs->tensors().size());
  int experts = 0;
  for (const auto& t : theirs->tensors()) {
    ASSERT_TRUE(ours->has(t.name)) << t.name;
    const Tensor a = ours->tensor(t.name), b = theirs->tensor(t.name);
    ASSERT_EQ(a.shape(), b.shape()) << t.name;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << t.name;
    experts += t.name.find("experts.") != std::string::npos;
  }
  EXPECT_EQ(experts, 4 * config.n_layers) << "A and B of both expert parameters in every layer";
  std::ifstream in(dir + "/adapter_config.json");
  const nlohmann::json cfg = nlohmann::json::parse(in);
  EXPECT_EQ(cfg["target_parameters"], nlohmann::json({"experts.gate_up_proj", "experts.down_proj"}));
  EXPECT_EQ(cfg["lora_dropout"], 0.0);
  auto back = load_adapter(dir, config, false, 1 << 16, shapes);
  ASSERT_EQ(back->flat().a.numel(), adapter->flat().a.numel());
  EXPECT_EQ(std::memcmp(back->flat().a.data(), adapter->flat().a.data(), adapter->flat().a.nbytes()), 0);
  EXPECT_EQ(std::memcmp(back->flat().b.data(), adapter->flat().b.data(), adapter->flat().b.nbytes()), 0);
}

TEST_P(ExpertAdapter, UnsupportedUsesAreRefusedNamingWhat) {
  const std::string family = GetParam();
  model::ModelConfig config;
  LoraShapes shapes;
  auto adapter = peft_adapter(family, config, shapes);
  auto message = [](const auto& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message([&] { adapter->set_dropout(0.1f); }).find("refuses lora_dropout != 0"), std::string::npos);
  LoraConfig with_dropout{.dropout = 0.05f, .targets = {Module::Q, Module::ExpertDown}};
  EXPECT_NE(message([&] { LoraAdapter(config, with_dropout, 1, shapes); }).find("experts.down_proj"),
            std::string::npos);

  // adapter_config.json edited: an unknown parameter, then no target_parameters at all.
  const std::string dir = ::testing::TempDir() + "/h14_expert_adapter_bad_" + family;
  std::filesystem::remove_all(dir);
  save_adapter(dir, *adapter, config, false, {.language_model = family == "gemma4"});
  nlohmann::json cfg;
  std::ifstream(dir + "/adapter_config.json") >> cfg;
  auto write = [&](const nlohmann::json& j) { std::ofstream(dir + "/adapter_config.json") << j.dump(); };
  cfg["target_parameters"] = {"experts.gate_up_proj", "router.proj.weight"};
  write(cfg);
  EXPECT_NE(message([&] { load_adapter(dir, config, false, 1 << 16, shapes); }).find("'router.proj.weight'"),
            std::string::npos);
  cfg.erase("target_parameters");
  write(cfg);
  const std::string no_parameters = message([&] { load_adapter(dir, config, false, 1 << 16, shapes); });
  EXPECT_NE(no_parameters.find("lora_A.weight' is no LoRA factor"), std::string::npos) << no_parameters;
}

// A factor that holds no numbers (i32) or a non-finite value is refused at
// load naming the file and the tensor: served, a NaN factor made every
// request of its adapter fail at its first sampled token.
TEST_P(ExpertAdapter, FactorsThatAreNotFiniteNumbersAreRefusedNamingTheTensor) {
  const std::string family = GetParam();
  model::ModelConfig config;
  LoraShapes shapes;
  auto adapter = peft_adapter(family, config, shapes);
  const std::string dir = ::testing::TempDir() + "/h24_expert_adapter_nan_" + family;
  std::filesystem::remove_all(dir);
  for (auto& e : adapter->entries())
    if (e.module == Module::ExpertDown) e.factors->b.data_as<float>()[3] = std::nanf("");
  save_adapter(dir, *adapter, config, false, {.language_model = family == "gemma4"});
  auto message = [&] {
    try {
      load_adapter(dir, config, false, 1 << 16, shapes);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string nan = message();
  EXPECT_NE(nan.find("experts.lora_B.weight' expected finite values, found nan at element 3"), std::string::npos)
      << nan;

  // The first tensor's dtype rewritten F32 -> I32 in the header (same width).
  const std::string path = dir + "/adapter_model.safetensors";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = bytes.find("\"F32\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 5, "\"I32\"");
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  const std::string i32 = message();
  EXPECT_NE(i32.find("expected float values (f32, f16, bf16 or a quantized type), found i32"), std::string::npos)
      << i32;
  EXPECT_NE(i32.find("adapter_model.safetensors: tensor '"), std::string::npos) << i32;
}

INSTANTIATE_TEST_SUITE_P(Families, ExpertAdapter, ::testing::Values("gemma4", "qwen35"));

}  // namespace
}  // namespace brioche::train
