// Tiny random-weight checkpoints written by transformers (save_pretrained,
// f32 safetensors) against the logits transformers computed for them
// (tools/oracle/model_goldens.py): llama with llama3 RoPE scaling, mistral
// with a sliding window of 7, qwen2 with qkv bias, qwen3 with q/k norm,
// head_dim != hidden/heads and tied embeddings. All GQA (4 heads, 2 kv).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/model.h"
#include "testing_paths.h"
#include "batch_builder.h"

namespace brioche::model {
namespace {

using testing::BatchBuilder;
using testing::BlockPool;
using testing::Step;
using testing::TestSequence;

struct Golden {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> logits;  // [rows, vocab]
};

Golden read_golden(const std::string& arch) {
  std::ifstream in(golden_path("tiny_" + arch + ".json"));
  nlohmann::json j = nlohmann::json::parse(in);
  return {j["ids"].get<std::vector<int32_t>>(), j["logits"].get<std::vector<std::vector<float>>>()};
}

// Max |ours - golden| over rows [row0, row0 + logits.dim(0)).
double max_error(const Tensor& logits, const Golden& g, int row0) {
  double err = 0;
  for (int64_t r = 0; r < logits.dim(0); ++r)
    for (int64_t v = 0; v < logits.dim(1); ++v)
      err = std::max(err, std::abs(double(logits.row_as<float>(r)[v]) - g.logits[row0 + r][v]));
  return err;
}

class TinyModel : public ::testing::TestWithParam<std::string> {};

// Measured max abs error (all 4 models, logits std ~0.6): < 3e-6.
constexpr double kTolerance = 1e-4;

TEST_P(TinyModel, PrefillMatchesTransformers) {
  auto model = Model::load(golden_path("tiny_" + GetParam()));
  Golden g = read_golden(GetParam());
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.architecture, GetParam());
  EXPECT_EQ(c.n_kv_heads, 2);
  KvCache cache(c, {.block_size = 4, .n_blocks = 16});
  BlockPool pool(16, 1);
  TestSequence seq;
  BatchBuilder b({{&seq, g.ids, true}}, pool, cache.block_size());
  Tensor logits;
  model->forward(b.batch, cache, logits);
  ASSERT_EQ(logits.dim(0), int64_t(g.ids.size()));
  ASSERT_EQ(logits.dim(1), c.vocab_size);
  double err = max_error(logits, g, 0);
  EXPECT_LT(err, kTolerance) << GetParam();
  std::printf("[ measured ] tiny_%s prefill max abs logit error %.2e\n", GetParam().c_str(), err);
}

TEST_P(TinyModel, ChunkedPrefillThenDecodeMatchesTransformers) {
  auto model = Model::load(golden_path("tiny_" + GetParam()));
  Golden g = read_golden(GetParam());
  KvCache cache(model->config(), {.block_size = 3, .n_blocks = 16, .dtype = DType::F32});
  BlockPool pool(16, 2);
  TestSequence seq;
  Tensor logits;
  double err = 0;
  // 9 rows, then 5, then one row at a time.
  size_t pos = 0;
  for (size_t chunk : {9, 5, 1, 1, 1, 1, 1, 1, 1, 1, 1}) {
    std::vector<int32_t> rows(g.ids.begin() + pos, g.ids.begin() + pos + chunk);
    BatchBuilder b({{&seq, rows, true}}, pool, cache.block_size());
    model->forward(b.batch, cache, logits);
    b.commit();
    err = std::max(err, max_error(logits, g, int(pos)));
    pos += chunk;
  }
  ASSERT_EQ(pos, g.ids.size());
  EXPECT_LT(err, kTolerance) << GetParam();
}

TEST_P(TinyModel, F16CacheStaysClose) {
  auto model = Model::load(golden_path("tiny_" + GetParam()));
  Golden g = read_golden(GetParam());
  KvCache cache(model->config(), {.block_size = 8, .n_blocks = 4, .dtype = DType::F16});
  BlockPool pool(4, 3);
  TestSequence seq;
  BatchBuilder b({{&seq, g.ids, true}}, pool, cache.block_size());
  Tensor logits;
  model->forward(b.batch, cache, logits);
  EXPECT_LT(max_error(logits, g, 0), 1e-2);  // f16 K/V: ~3 decimal digits
}

INSTANTIATE_TEST_SUITE_P(Architectures, TinyModel, ::testing::Values("llama", "mistral", "qwen2", "qwen3"));

TEST(TinyModelConfig, FlagsFromConfigJson) {
  auto llama = Model::load(golden_path("tiny_llama"));
  EXPECT_EQ(llama->config().rope.scaling.kind, ops::RopeScalingKind::Llama3);
  EXPECT_EQ(llama->config().rope.scaling.original_context, 16);
  EXPECT_FALSE(llama->config().tied_embeddings);
  EXPECT_EQ(llama->gguf(), nullptr);
  auto mistral = Model::load(golden_path("tiny_mistral"));
  EXPECT_EQ(mistral->config().sliding_window, 7);
  auto qwen2 = Model::load(golden_path("tiny_qwen2"));
  EXPECT_TRUE(qwen2->config().qkv_bias);
  EXPECT_FALSE(qwen2->config().qk_norm);
  auto qwen3 = Model::load(golden_path("tiny_qwen3"));
  EXPECT_TRUE(qwen3->config().qk_norm);
  EXPECT_TRUE(qwen3->config().tied_embeddings);
  EXPECT_EQ(qwen3->config().head_dim, 24);
  EXPECT_EQ(qwen3->config().weight_dtype, DType::F32);
  EXPECT_GT(qwen3->weight_bytes(), size_t(64 * 256 * 4));
}

// A scratch copy of a tiny checkpoint whose config.json or weights we alter.
std::string scratch_copy(const std::string& arch, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("brioche_model_test_" + name);
  fs::remove_all(dir);
  fs::copy(golden_path("tiny_" + arch), dir);
  return dir.string();
}

TEST(TinyModelErrors, UnsupportedArchitectureNamesItAndTheFile) {
  std::string dir = scratch_copy("llama", "gpt2");
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  cfg["model_type"] = "gpt2";
  std::ofstream(dir + "/config.json") << cfg.dump();
  try {
    Model::load(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("unsupported architecture 'gpt2' in " + dir), std::string::npos) << msg;
    EXPECT_NE(msg.find("supported: llama, mistral, qwen2, qwen3"), std::string::npos) << msg;
  }
}

TEST(TinyModelErrors, WrongShapeNamesTheTensor) {
  std::string dir = scratch_copy("qwen2", "shape");
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  cfg["intermediate_size"] = 100;
  std::ofstream(dir + "/config.json") << cfg.dump();
  try {
    Model::load(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mlp.gate_proj.weight"), std::string::npos) << e.what();
  }
}

TEST(TinyModelErrors, BadBatchIsRejected) {
  auto model = Model::load(golden_path("tiny_qwen2"));
  KvCache cache(model->config(), {.block_size = 4, .n_blocks = 2});
  std::vector<int32_t> table = {1};
  ForwardBatch batch;
  batch.tokens = {5, 6};
  batch.positions = {0, 1};
  batch.wants_logits = {0, 1};
  batch.sequences = {{.first_row = 0, .n_rows = 2, .n_past = 0, .block_table = table}};
  Tensor logits;
  model->forward(batch, cache, logits);  // valid
  batch.positions = {0, 2};
  EXPECT_THROW(model->forward(batch, cache, logits), Error);
  batch.positions = {0, 1};
  batch.tokens = {5, 999};
  EXPECT_THROW(model->forward(batch, cache, logits), Error);
  batch.tokens = {5, 6};
  batch.sequences[0].n_rows = 1;  // row 1 orphaned
  EXPECT_THROW(model->forward(batch, cache, logits), Error);
}

}  // namespace
}  // namespace brioche::model
