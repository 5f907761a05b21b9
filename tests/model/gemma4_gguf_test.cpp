// Gemma 4 GGUF files written by llama.cpp's own converter
// (tools/oracle/gemma4_gguf_fixtures.py: convert_hf_to_gguf.py, f32) from the
// transformers fixtures tests/fixtures/gemma4/{mix,e2b}; f32 is lossless (e2b's
// weights are bf16), so the fixtures' transformers goldens are the oracle.
// mix: sliding and full layers with their own head dims and kv heads, the
// full layers' proportional partial RoPE (as rope_freqs), attention_k_eq_v,
// an untied head, soft-capping; e2b: per-layer inputs, KV-shared layers with
// the double-wide MLP, tied embeddings.
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
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace brioche::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string fixtures() { return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/gemma4/"; }

// Every row of one prefill of `ids`.
std::vector<float> prefill(Model& model, const std::vector<int32_t>& ids) {
  KvCache cache(model.config(), {.block_size = 16, .n_blocks = 16, .dtype = DType::F32});
  ForwardBatch batch;
  std::vector<int32_t> blocks;
  for (int32_t b = 0; b * 16 < int32_t(ids.size()); ++b) blocks.push_back(b);
  batch.sequences.push_back({.first_row = 0, .n_rows = int32_t(ids.size()), .n_past = 0, .block_table = blocks});
  for (size_t i = 0; i < ids.size(); ++i) {
    batch.tokens.push_back(ids[i]);
    batch.positions.push_back(int32_t(i));
    batch.wants_logits.push_back(1);
  }
  Tensor logits;
  model.forward(batch, cache, logits);
  return std::vector<float>(logits.data_as<float>(), logits.data_as<float>() + logits.numel());
}

// As the directories' own tests (gemma4_test.cpp, logits std ~3.5; measured
// there mix 7e-5, e2b 1e-4).
constexpr double kTolerance = 1e-3;

class Gemma4Gguf : public ::testing::TestWithParam<std::string> {};

TEST_P(Gemma4Gguf, LogitsMatchTransformers) {
  const std::string name = GetParam(), path = fixtures() + "gguf/" + name + ".f32.gguf";
  std::unique_ptr<Model> model = Model::load(path);
  EXPECT_EQ(model->config().architecture, "gemma4");
  EXPECT_TRUE(Model::has_cuda_kernels(path));
  std::ifstream in(fixtures() + "goldens/" + name + ".json");
  const nlohmann::json g = nlohmann::json::parse(in);
  std::ifstream bin(fixtures() + "goldens/" + name + ".logits.f32", std::ios::binary);
  const int64_t vocab = g["vocab_size"].get<int64_t>();
  double err = 0;
  for (const nlohmann::json& p : g["prompts"]) {
    const std::vector<int32_t> ids = p["ids"].get<std::vector<int32_t>>();
    std::vector<float> want(ids.size() * size_t(vocab));
    bin.read(reinterpret_cast<char*>(want.data()), std::streamsize(want.size() * sizeof(float)));
    const std::vector<float> got = prefill(*model, ids);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(double(got[i]) - double(want[i])));
  }
  EXPECT_TRUE(bin.good());
  std::printf("[ measured ] gemma4 %s GGUF: max abs logit error (prompts of 5, 12, 37) %.2e\n", name.c_str(), err);
  EXPECT_LT(err, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Gemma4Gguf, ::testing::Values("mix", "e2b", "moe"));

// The mix file rewritten with one metadata key or tensor changed.
std::string error_with(const std::string& drop_key, const std::string& drop_tensor,
                       const std::function<void(formats::GgufWriter&)>& add = {}) {
  const auto f = formats::GgufFile::open(fixtures() + "gguf/mix.f32.gguf");
  formats::GgufWriter w;
  for (const auto& [key, value] : f->metadata())
    if (key != drop_key) w.add(key, value);
  for (const auto& t : f->tensors())
    if (t.name != drop_tensor) w.add_tensor(t.name, f->tensor(t.name));
  if (add) add(w);
  const fs::path path = fs::temp_directory_path() / ("brioche_gemma4_gguf_" + std::to_string(::getpid()) + ".gguf");
  w.write(path.string());
  std::string msg = "(loaded)";
  try {
    Model::load(path.string());
  } catch (const Error& e) {
    msg = e.what();
  }
  fs::remove(path);
  return msg;
}

TEST(Gemma4GgufErrors, NameTheKeyOrTensor) {
  EXPECT_THAT(error_with("gemma4.attention.sliding_window_pattern", ""),
              HasSubstr("metadata 'gemma4.attention.sliding_window_pattern' expected, found absent"));
  EXPECT_THAT(error_with("", "blk.1.attn_q_norm.weight"), HasSubstr("blk.1.attn_q_norm.weight"));
  EXPECT_THAT(
      error_with("gemma4.attention.head_count_kv", "",
                 [](formats::GgufWriter& w) {
                   w.add("gemma4.attention.head_count_kv", formats::GgufValue::ints(formats::GgufType::U32, {2, 1, 2}));
                 }),
      HasSubstr("gemma4.attention.head_count_kv: expected 4 entries (one per layer), found 3"));
  EXPECT_THAT(error_with("", "rope_freqs.weight",
                         [](formats::GgufWriter& w) {
                           Tensor t = Tensor::zeros(DType::F32, {16});
                           for (int i = 0; i < 16; ++i) t.data_as<float>()[i] = i < 4 ? 1.0f : 2.0f;
                           w.add_tensor("rope_freqs.weight", t);
                         }),
              HasSubstr("tensor 'rope_freqs.weight' [4]: expected 1 on the rotated pairs, then 1e30 (proportional "
                        "RoPE), found 2"));
}

}  // namespace
}  // namespace brioche::model
