// llama.cpp's GGUF LoRA files on Gemma 4, against the same adapters in the
// PEFT layout (tools/oracle/gemma4_gguf_lora_fixtures.py: llama.cpp's own
// convert_lora_to_gguf.py wrote tests/fixtures/gemma4/gguf/lora-<name>.f32.gguf
// from peft's tests/fixtures/gemma4/lora/<name>; f32 keeps the factors exact):
//   - the GGUF file reads to the PEFT adapter's sites, scale and factors, bit for bit;
//   - on the GGUF base (tests/fixtures/gemma4/gguf/<name>.f32.gguf), merged at load
//     (what `--adapter FILE.gguf` does) its logits equal peft's (logits.f32) and
//     those of the safetensors base with the PEFT adapter;
//   - served unmerged per request (what `serve --lora NAME=FILE.gguf` does) beside a
//     base-model sequence, the adapted rows equal the PEFT adapter served on the
//     safetensors base, and the base rows the base model's alone;
//   - hostile files (a wrong shape, a tensor that is no projection's factor, a factor
//     for a projection the layer lacks, half a pair, no adapter.lora.alpha) are
//     refused with the tensor or key named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
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
using ::testing::HasSubstr;

std::string fixture(const std::string& path) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/gemma4/" + path;
}
std::string gguf_adapter(const std::string& name) { return fixture("gguf/lora-" + name + ".f32.gguf"); }
std::string gguf_base(const std::string& name) { return fixture("gguf/" + name + ".f32.gguf"); }

struct Golden {
  std::vector<int32_t> ids;
  std::vector<float> logits;  // [ids.size(), vocab]: peft's adapted model
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

std::vector<float> rows_of(const Tensor& logits, int64_t first_row, int64_t n_rows) {
  const int64_t vocab = logits.dim(1);
  return {logits.row_as<float>(first_row), logits.row_as<float>(first_row) + n_rows * vocab};
}

double max_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    err = std::max(err, double(std::abs(got[i] - want[i])));
  return err;
}

// Every row's logits of `ids` with `adapter` then (when given) `other` with none, in one batch.
Tensor run(model::Model& m, const std::vector<int32_t>& ids, const model::ServedAdapter* adapter,
           const std::vector<int32_t>& other = {}) {
  model::KvCache kv(m.config(), {.block_size = 4, .n_blocks = 16, .dtype = DType::F32});
  BlockPool pool(16, 3);
  TestSequence a, b;
  std::vector<model::testing::Step> steps{{&a, ids, true}};
  if (!other.empty()) steps.push_back({&b, other, true});
  BatchBuilder batch(steps, pool, kv.block_size());
  batch.batch.sequences[0].adapter = adapter;
  Tensor logits;
  m.forward(batch.batch, kv, logits);
  return logits;
}

// The model at `path` with the adapter at `adapter` merged at load, as `--adapter` does.
std::shared_ptr<model::Model> merged(const std::string& path, const std::string& adapter) {
  model::LoadOptions options;
  options.adjust_gemma4_checkpoint = [&](model::Gemma4Checkpoint& ck) {
    merge_adapter(ck, *load_adapter(adapter, ck.config.base, false, 1 << 16, gemma4_lora_shapes(ck.config)));
  };
  return model::Model::load(path, options);
}

class Gemma4GgufAdapter : public ::testing::TestWithParam<std::string> {};

TEST_P(Gemma4GgufAdapter, ReadsToThePeftAdaptersFactors) {
  const std::string name = GetParam();
  const model::Gemma4Checkpoint ck = model::load_gemma4_checkpoint(fixture(name));
  const LoraShapes shapes = gemma4_lora_shapes(ck.config);
  auto peft = load_adapter(fixture("lora/" + name), ck.config.base, false, 1 << 16, shapes);
  auto gguf = load_adapter(gguf_adapter(name), ck.config.base, false, 1 << 16, shapes);
  EXPECT_EQ(gguf->scale(), peft->scale());
  EXPECT_EQ(gguf->config().rank, peft->config().rank);
  const std::vector<LoraAdapter::Entry> want = peft->entries(), got = gguf->entries();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const LoraAdapter::Entry& p = want[i];
    const LoraAdapter::Entry& g = got[i];
    ASSERT_EQ(g.layer, p.layer);
    ASSERT_EQ(g.module, p.module);
    for (const auto& [gt, pt] : {std::pair{&g.factors->a, &p.factors->a}, {&g.factors->b, &p.factors->b}}) {
      ASSERT_EQ(gt->shape(), pt->shape()) << "layer " << p.layer << " " << module_name(p.module);
      for (int64_t j = 0; j < pt->numel(); ++j)
        ASSERT_EQ(gt->data_as<float>()[j], pt->data_as<float>()[j])
            << "layer " << p.layer << " " << module_name(p.module);
    }
  }
}

TEST_P(Gemma4GgufAdapter, MergedOnTheGgufBaseMatchesPeft) {
  const std::string name = GetParam();
  const Golden g = read_golden(name);
  const int64_t n = int64_t(g.ids.size());
  auto gguf = merged(gguf_base(name), gguf_adapter(name));
  auto peft = merged(fixture(name), fixture("lora/" + name));
  auto base = model::Model::load(gguf_base(name), {});
  const std::vector<float> got = rows_of(run(*gguf, g.ids, nullptr), 0, n);
  const double err = max_error(got, g.logits);
  const double twin = max_error(got, rows_of(run(*peft, g.ids, nullptr), 0, n));
  const double moved = max_error(rows_of(run(*base, g.ids, nullptr), 0, n), g.logits);
  std::printf(
      "%s GGUF adapter merged on the GGUF base: largest logit error %.2e against peft, %.2e against the PEFT "
      "adapter on the safetensors base (the base model is %.3g away)\n",
      name.c_str(), err, twin, moved);
  EXPECT_LT(err, 1e-3);
  EXPECT_LT(twin, 1e-4);
  EXPECT_GT(moved, 0.1) << "the adapter changes the outputs";
}

TEST_P(Gemma4GgufAdapter, ServedPerRequestOnTheGgufBaseMatchesThePeftAdapter) {
  const std::string name = GetParam();
  const Golden g = read_golden(name);
  const int64_t n = int64_t(g.ids.size());
  auto gguf_model = model::Model::load(gguf_base(name), {});
  auto st_model = model::Model::load(fixture(name), {});
  auto gguf = serving_adapter(*load_adapter(gguf_adapter(name), gguf_model->config(), has_permuted_qk(*gguf_model),
                                            1 << 16, lora_shapes_of(*gguf_model)),
                              Device::CPU);
  auto peft = serving_adapter(
      *load_adapter(fixture("lora/" + name), st_model->config(), false, 1 << 16, lora_shapes_of(*st_model)),
      Device::CPU);
  const Tensor mixed = run(*gguf_model, g.ids, gguf.get(), g.ids);
  const double twin = max_error(rows_of(mixed, 0, n), rows_of(run(*st_model, g.ids, peft.get()), 0, n));
  const double peft_err = max_error(rows_of(mixed, 0, n), g.logits);
  const double base_err = max_error(rows_of(mixed, n, n), rows_of(run(*gguf_model, g.ids, nullptr), 0, n));
  std::printf(
      "%s GGUF adapter served: largest logit error %.2e against the PEFT adapter served on the safetensors "
      "base (%.2e against peft's f32 factors); base rows beside it differ by %.2e\n",
      name.c_str(), twin, peft_err, base_err);
  EXPECT_LT(twin, 1e-4);
  EXPECT_LT(peft_err, 0.2);  // served factors are f16 (gemma4_adapter_test.cpp)
  EXPECT_LT(base_err, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Gemma4GgufAdapter, ::testing::Values("mix", "e2b", "moe"));

// The mix adapter file rewritten without `drop_key` / `drop_tensor`, with `add` applied, then read for the
// mix model; the error, or "(loaded)".
std::string error_with(const std::string& drop_key, const std::string& drop_tensor,
                       const std::function<void(formats::GgufWriter&)>& add = {}) {
  const auto f = formats::GgufFile::open(gguf_adapter("mix"));
  formats::GgufWriter w;
  for (const auto& [key, value] : f->metadata())
    if (key != drop_key) w.add(key, value);
  for (const auto& t : f->tensors())
    if (t.name != drop_tensor) w.add_tensor(t.name, f->tensor(t.name));
  if (add) add(w);
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("brioche_gemma4_gguf_lora_" + std::to_string(::getpid()) + ".gguf");
  w.write(path.string());
  std::string msg = "(loaded)";
  try {
    const model::Gemma4Checkpoint ck = model::load_gemma4_checkpoint(fixture("mix"));
    load_adapter(path.string(), ck.config.base, false, 1 << 16, gemma4_lora_shapes(ck.config));
  } catch (const Error& e) {
    msg = e.what();
  }
  std::filesystem::remove(path);
  return msg;
}

TEST(Gemma4GgufAdapterErrors, NameTheTensorOrKey) {
  EXPECT_EQ(error_with("", ""), "(loaded)");
  // mix: layer 0 sliding (hidden 48, q 4 heads x 16), layer 1 full with attention_k_eq_v (no v_proj).
  EXPECT_THAT(error_with("", "blk.0.attn_q.weight.lora_a",
                         [](formats::GgufWriter& w) {
                           w.add_tensor("blk.0.attn_q.weight.lora_a", Tensor::zeros(DType::F32, {4, 40}));
                         }),
              HasSubstr("tensor 'blk.0.attn_q.weight.lora_a' expected shape [4, 48], found"));
  EXPECT_THAT(error_with("", "",
                         [](formats::GgufWriter& w) {
                           w.add_tensor("blk.0.inp_gate.weight.lora_a", Tensor::zeros(DType::F32, {4, 48}));
                           w.add_tensor("blk.0.inp_gate.weight.lora_b", Tensor::zeros(DType::F32, {8, 4}));
                         }),
              HasSubstr("tensor 'blk.0.inp_gate.weight.lora_a' is not a LoRA factor brioche applies"));
  EXPECT_THAT(error_with("", "",
                         [](formats::GgufWriter& w) {
                           w.add_tensor("blk.1.attn_v.weight.lora_a", Tensor::zeros(DType::F32, {4, 48}));
                           w.add_tensor("blk.1.attn_v.weight.lora_b", Tensor::zeros(DType::F32, {32, 4}));
                         }),
              HasSubstr("tensor 'blk.1.attn_v.weight.lora_a' adapts a projection that layer 1 of this model does "
                        "not have"));
  EXPECT_THAT(error_with("", "blk.2.ffn_up.weight.lora_b"), HasSubstr("blk.2.ffn_up.weight.lora_b is missing"));
  EXPECT_THAT(error_with("adapter.lora.alpha", ""),
              HasSubstr("metadata 'adapter.lora.alpha' expected (llama.cpp's convert_lora_to_gguf.py writes PEFT's "
                        "lora_alpha there), found absent"));
  EXPECT_THAT(
      error_with("general.architecture", "",
                 [](formats::GgufWriter& w) { w.add("general.architecture", formats::GgufValue::string("llama")); }),
      HasSubstr("an adapter for architecture 'llama', the model is 'gemma4'"));
}

}  // namespace
}  // namespace brioche::train
