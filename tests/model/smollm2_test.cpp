// The default model (SmolLM2-135M-Instruct, GGUF Q4_1 + Q8_0 embeddings)
// against transformers running the same weights dequantized to f32
// (tools/oracle/model_goldens.py), and ragged batches against single runs.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "batch_builder.h"
#include "testing_paths.h"

namespace brioche::model {
namespace {

using testing::BatchBuilder;
using testing::BlockPool;
using testing::Step;
using testing::TestSequence;

struct Prompt {
  std::vector<int32_t> ids, greedy;
};

struct SmolGolden {
  std::vector<Prompt> prompts;
  std::vector<float> logits;  // [n_prompts, vocab]
  int vocab = 0;
};

SmolGolden read_golden() {
  std::ifstream in(golden_path("smollm2.json"));
  nlohmann::json j = nlohmann::json::parse(in);
  SmolGolden g;
  g.vocab = j["vocab_size"].get<int>();
  for (auto& p : j["prompts"])
    g.prompts.push_back({p["ids"].get<std::vector<int32_t>>(), p["greedy"].get<std::vector<int32_t>>()});
  std::ifstream bin(golden_path("smollm2_logits.f32"), std::ios::binary);
  g.logits.resize(size_t(g.prompts.size()) * g.vocab);
  bin.read(reinterpret_cast<char*>(g.logits.data()), std::streamsize(g.logits.size() * 4));
  EXPECT_TRUE(bin.good()) << "short golden logits file";
  return g;
}

int argmax(const float* x, int n) { return int(std::max_element(x, x + n) - x); }

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(default_model_path())) return;
    model_ = Model::load(default_model_path()).release();
  }
  static void TearDownTestSuite() { delete model_; }
  void SetUp() override {
    if (model_ == nullptr) GTEST_SKIP() << "skipped: default model not found at " << default_model_path();
  }
  static Model* model_;
};
Model* SmolLM2::model_ = nullptr;

TEST_F(SmolLM2, ConfigFromGgufMetadata) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_FLOAT_EQ(c.rope.theta, 100000.0f);
  EXPECT_EQ(c.rope.style, ops::RopeStyle::Interleaved);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.weight_dtype, DType::Q4_1);
  ASSERT_NE(model_->gguf(), nullptr);
  EXPECT_NE(model_->chat_template().find("im_start"), std::string::npos);
}

// Last-row logits of each prompt against the golden; returns the max abs error.
double prompt_logit_error(Model& model, const SmolGolden& g) {
  KvCache cache(model.config(), {.block_size = 16, .n_blocks = 64});
  BlockPool pool(64, 7);
  double worst = 0;
  for (size_t p = 0; p < g.prompts.size(); ++p) {
    TestSequence seq;
    BatchBuilder b({{&seq, g.prompts[p].ids}}, pool, cache.block_size());
    Tensor logits;
    model.forward(b.batch, cache, logits);
    EXPECT_EQ(logits.dim(0), 1);
    const float* want = &g.logits[p * g.vocab];
    for (int v = 0; v < g.vocab; ++v) worst = std::max(worst, std::abs(double(logits.data_as<float>()[v]) - want[v]));
  }
  return worst;
}

// Greedy continuation of every prompt; returns how many tokens match.
int greedy_matches(Model& model, const SmolGolden& g, double* decode_tokens_per_s) {
  KvCache cache(model.config(), {.block_size = 16, .n_blocks = 64});
  BlockPool pool(64, 8);
  Tensor logits;
  int matched = 0, decode_steps = 0;
  double decode_seconds = 0;
  for (const Prompt& prompt : g.prompts) {
    TestSequence seq;
    std::vector<int32_t> next = prompt.ids, generated;
    while (generated.size() < prompt.greedy.size()) {
      auto t0 = std::chrono::steady_clock::now();
      BatchBuilder b({{&seq, next}}, pool, cache.block_size());
      model.forward(b.batch, cache, logits);
      b.commit();
      if (next.size() == 1) {
        decode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++decode_steps;
      }
      int token = argmax(logits.data_as<float>(), model.config().vocab_size);
      generated.push_back(token);
      next = {token};
    }
    for (size_t i = 0; i < generated.size(); ++i) matched += generated[i] == prompt.greedy[i];
  }
  *decode_tokens_per_s = decode_steps / decode_seconds;
  return matched;
}

// The same GGUF with every weight dequantized to f32 at load computes what
// transformers computes: this checks the architecture (interleaved RoPE on
// permuted Q/K, GQA, tied embeddings) with no quantization noise.
// Measured: max abs logit error 3e-5 (logits up to ~25); greedy 192/192.
TEST_F(SmolLM2, DequantizedToF32MatchesTransformers) {
  SmolGolden g = read_golden();
  auto f32 = Model::load(default_model_path(), {.convert_weights = DType::F32});
  EXPECT_EQ(f32->config().weight_dtype, DType::F32);
  double err = prompt_logit_error(*f32, g);
  EXPECT_LT(err, 1e-3);
  double speed = 0;
  int matched = greedy_matches(*f32, g, &speed);
  int total = 0;
  for (const Prompt& p : g.prompts) total += int(p.greedy.size());
  EXPECT_EQ(matched, total);
  std::printf("[ measured ] smollm2 (weights -> f32) max abs logit error %.2e; greedy %d/%d\n", err, matched, total);
}

// As shipped (Q4_1 weights, Q8_0 embeddings): the quantized matmul kernels
// round activations to 8 bits per block of 32 (~0.3% relative error per
// matmul, like llama.cpp's Q8_1 path), which over 30 layers moves logits by
// up to ~1 (measured 1.03 on logits of magnitude ~25). The golden's top-2
// margins go down to 0.01, so greedy continuations drift apart after a few
// tokens; their match count is printed, not asserted.
constexpr double kQuantizedLogitTolerance = 1.5;

TEST_F(SmolLM2, QuantizedLogitsStayNearTransformers) {
  SmolGolden g = read_golden();
  ASSERT_EQ(g.vocab, model_->config().vocab_size);
  double err = prompt_logit_error(*model_, g);
  EXPECT_LT(err, kQuantizedLogitTolerance);
  double speed = 0;
  int matched = greedy_matches(*model_, g, &speed);
  std::printf(
      "[ measured ] smollm2 Q4_1 max abs logit error %.3f (tolerance %.1f); greedy tokens "
      "matching the f32 oracle %d/192; decode %.1f tokens/s with %d threads (informational)\n",
      err, kQuantizedLogitTolerance, matched, speed, ThreadPool::global().size());
}

// Several sequences stepped together — prefill rows of some, decode rows of
// others, different lengths, shuffled block tables — give the logits each
// sequence gets alone.
TEST_F(SmolLM2, RaggedBatchMatchesSequencesAlone) {
  SmolGolden g = read_golden();
  const int vocab = model_->config().vocab_size;
  const int n = int(g.prompts.size());
  auto continuation = [&](int s, int i) { return g.prompts[s].greedy[i]; };

  // Alone: each prompt prefilled, then 4 decode steps fed from the golden.
  std::vector<std::vector<std::vector<float>>> alone(n);
  {
    KvCache cache(model_->config(), {.block_size = 16, .n_blocks = 32});
    for (int s = 0; s < n; ++s) {
      BlockPool pool(32, 100 + s);
      TestSequence seq;
      Tensor logits;
      for (int step = 0; step < 5; ++step) {
        std::vector<int32_t> rows = step == 0 ? g.prompts[s].ids : std::vector<int32_t>{continuation(s, step - 1)};
        BatchBuilder b({{&seq, rows}}, pool, cache.block_size());
        model_->forward(b.batch, cache, logits);
        b.commit();
        alone[s].emplace_back(logits.data_as<float>(), logits.data_as<float>() + vocab);
      }
    }
  }
  // Together: sequence s starts s steps late, so prefills of later sequences
  // share batches with decode steps of earlier ones.
  KvCache cache(model_->config(), {.block_size = 16, .n_blocks = 96});
  BlockPool pool(96, 42);
  std::vector<TestSequence> seqs(n);
  std::vector<int> done(n, 0);
  double worst = 0;
  for (int t = 0; t < 5 + n; ++t) {
    std::vector<Step> steps;
    std::vector<int> who;
    for (int s = n - 1; s >= 0; --s) {  // reverse order: rows not sorted by sequence id
      int step = t - s;
      if (step < 0 || step >= 5) continue;
      steps.push_back({&seqs[s], step == 0 ? g.prompts[s].ids : std::vector<int32_t>{continuation(s, step - 1)}});
      who.push_back(s);
    }
    if (steps.empty()) continue;
    BatchBuilder b(steps, pool, cache.block_size());
    Tensor logits;
    model_->forward(b.batch, cache, logits);
    b.commit();
    ASSERT_EQ(logits.dim(0), int64_t(who.size()));
    for (size_t k = 0; k < who.size(); ++k) {
      int s = who[k];
      const auto& want = alone[s][done[s]++];
      for (int v = 0; v < vocab; ++v) worst = std::max(worst, std::abs(double(logits.row_as<float>(k)[v]) - want[v]));
      EXPECT_EQ(argmax(logits.row_as<float>(k), vocab), argmax(want.data(), vocab));
    }
  }
  EXPECT_LT(worst, 1e-5);  // measured 0: rows never see each other's numerics
  std::printf("[ measured ] smollm2 ragged vs alone max abs logit difference %.2e\n", worst);
}

TEST_F(SmolLM2, CopyBlockDuplicatesAPrefix) {
  // Two sequences sharing a 16-token prefix: the second copies the first's
  // block (copy-on-write) and must continue exactly like the first.
  SmolGolden g = read_golden();
  std::vector<int32_t> text = g.prompts[1].ids;
  text.insert(text.end(), g.prompts[1].greedy.begin(), g.prompts[1].greedy.end());
  std::vector<int32_t> prefix(text.begin(), text.begin() + 16);
  KvCache cache(model_->config(), {.block_size = 16, .n_blocks = 4});
  BlockPool pool(4, 9);
  TestSequence a;
  Tensor la, lb;
  BatchBuilder pa({{&a, prefix}}, pool, 16);
  model_->forward(pa.batch, cache, la);
  pa.commit();
  TestSequence b;
  b.blocks = {pool.take()};
  cache.copy_block(a.blocks[0], b.blocks[0]);
  b.n_past = 16;
  BatchBuilder sa({{&a, {text[16]}}}, pool, 16);
  model_->forward(sa.batch, cache, la);
  BatchBuilder sb({{&b, {text[16]}}}, pool, 16);
  model_->forward(sb.batch, cache, lb);
  for (int v = 0; v < model_->config().vocab_size; ++v) ASSERT_EQ(la.data_as<float>()[v], lb.data_as<float>()[v]) << v;
}

TEST(ModelLoad, MissingPathAndUnsupportedGgufArchitecture) {
  EXPECT_THROW(Model::load("/nonexistent/model.gguf"), Error);
  formats::GgufWriter w;
  w.add("general.architecture", formats::GgufValue::string("gpt2"));
  std::string path = (std::filesystem::temp_directory_path() / "brioche_gpt2.gguf").string();
  w.write(path);
  try {
    Model::load(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported architecture 'gpt2' in " + path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace brioche::model
