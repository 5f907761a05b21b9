// LoRA training on Qwen 3.5 against torch autograd + peft
// (tools/oracle/qwen35_lora_oracle.py, f64): the dense fixture of
// tests/fixtures/qwen35/dense (Gated DeltaNet and gated-attention layers)
// with a random, non-zero peft adapter on q/k/v/o, gate/up/down and the
// linear-attention layers' in_proj_qkv/in_proj_z/in_proj_b/in_proj_a/out_proj,
// two sequences (75 and 37 rows: longer than a delta-rule chunk and than the
// backward's checkpoint interval) in one batch. The mean next-token NLL and
// d loss / d every lora_A and lora_B equal peft's; the prefix-shared layout
// gives the plain layout's gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/safetensors.h"
#include "model/qwen35_weights.h"
#include "train/adapter_io.h"
#include "train/batch_builder.h"
#include "train/lm_head.h"
#include "lora_oracle_case.h"
#include "train/lora_tensors.h"
#include "train/qwen35_train_model.h"

namespace brioche::train {
namespace {

std::string fixture(const std::string& path) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/qwen35/" + path;
}

LoraOracleCase read_case(const std::string& name = "dense") {
  return read_lora_oracle_case(fixture("lora/" + name + "/case.json"));
}

// max |a − b| / max |b| over a tensor pair (relative to the tensor's own scale; with floor 1: relative to
// max(1, max |b|), the Gemma 4 test's measure).
double relative_error(const Tensor& got, const Tensor& want, double floor = 1e-30) {
  return lora_relative_error(got, want, floor);
}

// Loss and LoRA gradients of `adapter` on the case's batch (mean NLL of every next token).
double loss_and_grads(const model::Qwen35Checkpoint& ck, LoraAdapter& adapter, const TokenBatch& batch,
                      int expect_first = 0) {
  Qwen35TrainModel model(ck, &adapter);
  EXPECT_EQ(model.first_trainable_layer(), expect_first);
  const Tensor prefix = model.frozen_prefix(batch);
  const Tensor hidden = model.forward(batch, prefix, {.for_backward = true});
  PlainLogpHead head(ck.output);
  const std::vector<float> logp = head.forward(hidden, batch.scored);
  double loss = 0.0;
  for (float l : logp) loss -= l;
  loss /= double(logp.size());
  const std::vector<float> d_logp(logp.size(), -1.0f / float(logp.size()));
  Tensor d_hidden = Tensor::zeros(DType::F32, {hidden.dim(0), hidden.dim(1)});
  head.backward(d_logp, d_hidden);
  adapter.zero_grads();
  model.backward(std::move(d_hidden));
  return loss;
}

// name: the case in lora/; model_dir: its fixture (the case's name unless given).
void check_gradients(const std::string& name, size_t expect_tensors, const std::string& model_dir = "") {
  const model::Qwen35Checkpoint ck = model::load_qwen35_checkpoint(fixture(model_dir.empty() ? name : model_dir));
  auto adapter = load_adapter(fixture("lora/" + name), ck.config, false, 1 << 16, qwen35_lora_shapes(ck));
  const LoraOracleCase c = read_case(name);
  const double loss = loss_and_grads(ck, *adapter, c.batch);
  EXPECT_NEAR(loss, c.loss, 1e-6 * std::abs(c.loss));

  auto golden = formats::SafetensorsFile::open(fixture("lora/" + name + "/grads.safetensors"));
  size_t compared = 0;
  double worst = 0.0, worst_floored = 0.0;
  std::string worst_key;
  for (auto& e : adapter->entries()) {
    for (const char* ab : {"lora_A", "lora_B"}) {
      const std::string key = peft_tensor_name(ck.config, *adapter, e.layer, e.module, ab);
      ASSERT_TRUE(golden->has(key)) << key;
      const Tensor& got = ab[5] == 'A' ? e.factors->grad_a : e.factors->grad_b;
      const double err = relative_error(got, golden->tensor(key));
      EXPECT_LT(err, 5e-4) << key;  // f32 against f64: the worst is 2.4e-4 of the tensor's largest entry
      worst_floored = std::max(worst_floored, relative_error(got, golden->tensor(key), 1.0));
      if (err > worst) worst = err, worst_key = key;
      ++compared;
    }
  }
  EXPECT_EQ(compared, golden->tensors().size()) << "every LoRA tensor peft made is one brioche trains";
  EXPECT_EQ(compared, expect_tensors);
  std::printf(
      "qwen35 %s: loss %.8f (oracle %.8f, %.1e relative), %zu gradient tensors, worst relative error %.2e (%s), "
      "%.2e relative to max(1, max |grad|)\n",
      name.c_str(), loss, c.loss, std::abs(loss - c.loss) / c.loss, compared, worst, worst_key.c_str(), worst_floored);
}

TEST(Qwen35Train, LoraGradientsMatchPeftThroughDeltaNetAndGatedAttention) {
  check_gradients("dense", 60);  // q/k/v/o + gate/up/down on 2 full layers, 5 + 3 projections on 2 linear layers
}

TEST(Qwen35Train, LoraGradientsMatchPeftThroughTheMoeBlock) {
  // moe: top-2 of 4 experts and a gated shared expert, frozen (transformers' router softmax runs in f32, the rest
  // in f64); LoRA on q/k/v/o of 2 full layers and the 5 projections of 2 linear layers.
  check_gradients("moe", 36);
}

TEST(Qwen35Train, ExpertAndSharedExpertLoraGradientsMatchPeft) {
  // moe_experts: LoRA on everything peft adapts in the moe model: the 12 module names (gate/up/down are the
  // shared expert's), shared_expert_gate, and target_parameters experts.gate_up_proj / experts.down_proj
  // (per-expert rank-4 factors; peft's gate_up delta is gate rows, then up rows, which brioche keeps apart).
  check_gradients("moe_experts", 84, "moe");  // 36 + 4 layers × (3 shared expert + 1 gate + 2 expert) × 2
}

TEST(Qwen35Train, FrozenPrefixGivesTheSameGradientsAsTrainingFromTheEmbedding) {
  // An adapter on the last two layers starts the trainable range at layer 2 (a linear layer); the same
  // factors there, with B = 0 (no effect on the forward) on layers 0 and 1, train from the embedding.
  const model::Qwen35Checkpoint ck = model::load_qwen35_checkpoint(fixture("dense"));
  const LoraOracleCase c = read_case();
  LoraConfig lora;
  lora.targets = {Module::Q,       Module::K,       Module::V,       Module::O,
                  Module::Gate,    Module::Up,      Module::Down,    Module::LinearQkv,
                  Module::LinearZ, Module::LinearB, Module::LinearA, Module::LinearOut};
  LoraConfig last_two = lora;
  last_two.num_layers = 2;
  LoraAdapter partial(ck.config, last_two, 5, qwen35_lora_shapes(ck));
  LoraAdapter full(ck.config, lora, 6, qwen35_lora_shapes(ck));
  for (auto& e : full.entries()) {
    if (LoraFactors* f = partial.factors(e.layer, e.module)) {
      std::copy_n(f->a.data_as<float>(), f->a.numel(), e.factors->a.data_as<float>());
      for (int64_t i = 0; i < f->b.numel(); ++i) e.factors->b.data_as<float>()[i] = 0.01f * float(i % 7 - 3);
      std::copy_n(e.factors->b.data_as<float>(), f->b.numel(), f->b.data_as<float>());
    }
  }
  loss_and_grads(ck, partial, c.batch, 2);
  loss_and_grads(ck, full, c.batch, 0);
  double worst = 0.0, size = 0.0;
  size_t compared = 0;
  for (auto& e : partial.entries()) {
    const LoraFactors* f = full.factors(e.layer, e.module);
    ASSERT_NE(f, nullptr);
    worst =
        std::max({worst, relative_error(e.factors->grad_a, f->grad_a), relative_error(e.factors->grad_b, f->grad_b)});
    for (int64_t i = 0; i < e.factors->grad_b.numel(); ++i)
      size = std::max(size, double(std::abs(e.factors->grad_b.data_as<float>()[i])));
    ++compared;
  }
  EXPECT_EQ(compared, 15u);  // layer 2 (linear): 5 + 3, layer 3 (full): 4 + 3
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(size, 1e-3) << "the gradients are not all zero";
}

TEST(Qwen35Train, SitesFollowEachLayersKind) {
  const model::Qwen35Checkpoint ck = model::load_qwen35_checkpoint(fixture("dense"));
  LoraConfig lora;
  lora.targets = {Module::Q, Module::O, Module::LinearQkv, Module::LinearB, Module::LinearOut, Module::Down};
  LoraAdapter a(ck.config, lora, 1, qwen35_lora_shapes(ck));
  // Layers: linear, full, linear, full.
  EXPECT_EQ(a.factors(0, Module::Q), nullptr);
  ASSERT_NE(a.factors(0, Module::LinearQkv), nullptr);
  EXPECT_EQ(a.factors(0, Module::LinearQkv)->b.dim(0), ck.qwen.conv_channels());
  EXPECT_EQ(a.factors(0, Module::LinearB)->b.dim(0), ck.qwen.linear_v_heads);
  EXPECT_EQ(a.factors(0, Module::LinearOut)->a.dim(1), ck.qwen.value_width());
  EXPECT_EQ(a.factors(1, Module::LinearQkv), nullptr);
  ASSERT_NE(a.factors(1, Module::Q), nullptr);
  EXPECT_EQ(a.factors(1, Module::Q)->b.dim(0), 2 * ck.config.n_heads * ck.config.head_dim);  // query and gate rows
  ASSERT_NE(a.factors(2, Module::Down), nullptr);
  EXPECT_THROW(LoraAdapter(ck.config, lora, std::vector<LoraAdapter::Site>{{0, Module::Q}}, qwen35_lora_shapes(ck)),
               Error);
  EXPECT_EQ(parse_module("in_proj_qkv"), Module::LinearQkv);
  EXPECT_EQ(parse_module("out"), Module::LinearOut);
  EXPECT_FALSE(parse_module("in_pr").has_value());
}

// One pair through the prefix-shared layout ([prompt; chosen; rejected] in one span, each branch continuing the
// prompt's conv and delta-rule state) or laid out plainly as two sequences; one weight per scored token by
// (sequence, target), so both layouts have the same loss.

PairRun run_pair(const model::Qwen35Checkpoint& ck, LoraAdapter& adapter, const TokenizedPair& pair, bool shared) {
  const TokenizedPair* pairs[] = {&pair, &pair};
  const TokenBatch batch =
      build_preference_batch(pairs, {.method = Method::ORPO, .sft_scope = SftScope::Response, .prefix_shared = shared});
  Qwen35TrainModel model(ck, &adapter);
  const Tensor hidden = model.forward(batch, model.frozen_prefix(batch), {.for_backward = true});
  PlainLogpHead head(ck.output);
  PairRun out;
  out.rows = batch.n_rows();
  out.logp = head.forward(hidden, batch.scored);
  std::vector<float> d_logp;
  for (const ScoredToken& t : batch.scored)
    d_logp.push_back(t.sequence % 2 == 0 ? -0.5f : 0.25f + 0.001f * float(t.target % 100) + 0.1f * t.sequence);
  Tensor d_hidden = Tensor::zeros(DType::F32, {hidden.dim(0), hidden.dim(1)});
  head.backward(d_logp, d_hidden);
  adapter.zero_grads();
  model.backward(std::move(d_hidden));
  for (auto& e : adapter.entries()) {
    out.grads.push_back(copy_f32(e.factors->grad_a));
    out.grads.push_back(copy_f32(e.factors->grad_b));
  }
  return out;
}

TEST(Qwen35Train, PrefixSharedEqualsTheTwoSequencesLaidOutPlainly) {
  // A 37-token prompt (two delta-rule chunks and a ragged one: the branches continue a state from inside a chunk)
  // with replies of 38 and 30 tokens, twice in one batch. Both branches' gradients flow back into the prompt
  // through its final delta-rule state and its last 3 conv inputs, where they add.
  const model::Qwen35Checkpoint ck = model::load_qwen35_checkpoint(fixture("dense"));
  auto adapter = load_adapter(fixture("lora/dense"), ck.config, false, 1 << 16, qwen35_lora_shapes(ck));
  const LoraOracleCase c = read_case();
  ASSERT_EQ(c.batch.spans.size(), 2u);
  const auto& s0 = c.batch.spans[0];
  const auto& s1 = c.batch.spans[1];
  ASSERT_GE(s0.n_rows, 75);
  ASSERT_GE(s1.n_rows, 31);
  const auto tokens = [&](int32_t from, int32_t to) {
    return std::vector<int32_t>(c.batch.tokens.begin() + from, c.batch.tokens.begin() + to);
  };
  const TokenizedPair pair{.prompt = tokens(s0.first_row, s0.first_row + 37),
                           .chosen = tokens(s0.first_row + 37, s0.first_row + 75),
                           .rejected = tokens(s1.first_row + 1, s1.first_row + 31)};
  // (The chunks around the prompt's end are cut differently in the two layouts: f32 rounding.)
  expect_prefix_shared_equals_plain("qwen35", run_pair(ck, *adapter, pair, false), run_pair(ck, *adapter, pair, true),
                                    2 * 37, 1e-30);
}

TEST(Qwen35Train, RefusesABranchLayoutOtherThanPromptChosenRejected) {
  const model::Qwen35Checkpoint ck = model::load_qwen35_checkpoint(fixture("dense"));
  LoraAdapter adapter(ck.config, LoraConfig{}, 1, qwen35_lora_shapes(ck));
  Qwen35TrainModel model(ck, &adapter);
  TokenBatch batch{.tokens = {5, 6, 7, 8}, .positions = {0, 1, 2, 2}, .branch = {0, 0, 2, 1}, .spans = {{0, 4}}};
  try {
    model.forward(batch, {.for_backward = true});
    FAIL() << "a rejected row before a chosen row was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[prompt; chosen; rejected]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace brioche::train
