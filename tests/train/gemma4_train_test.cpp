// LoRA training on Gemma 4 against torch autograd + peft
// (tools/oracle/gemma4_lora_oracle.py): the fixtures' models of
// tests/fixtures/gemma4/{mix,e2b,bias,moe} (bias: mix with attention_bias; moe:
// the MoE block, in a Gemma4ForConditionalGeneration) with a random, non-zero peft adapter on
// every projection peft finds (no k/v in KV-shared layers, no v in
// attention_k_eq_v full layers), two sequences longer than the sliding
// window in one batch. The mean next-token NLL (through the soft-capped
// head) and d loss / d every lora_A and lora_B equal transformers' f64
// values within f32 rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/safetensors.h"
#include "model/gemma4_weights.h"
#include "train/adapter_io.h"
#include "train/batch_builder.h"
#include "train/gemma4_train_model.h"
#include "train/lm_head.h"
#include "lora_oracle_case.h"
#include "train/lora_tensors.h"

namespace brioche::train {
namespace {

std::string fixture(const std::string& path) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/gemma4/" + path;
}

LoraOracleCase read_case(const std::string& name) {
  return read_lora_oracle_case(fixture("lora/" + name + "/case.json"));
}

// max |a − b| / max(1, max |b|) over a tensor pair.
double relative_error(const Tensor& got, const Tensor& want) { return lora_relative_error(got, want, 1.0); }

// name: the case in lora/; model_dir: its fixture (the case's name unless given).
void check_gradients(const std::string& name, int segment_size = 0, const std::string& model_dir = "") {
  const model::Gemma4Checkpoint ck = model::load_gemma4_checkpoint(fixture(model_dir.empty() ? name : model_dir));
  auto adapter = load_adapter(fixture("lora/" + name), ck.config.base, false, 1 << 16, gemma4_lora_shapes(ck.config));
  LoraOracleCase c = read_case(name);
  Gemma4TrainModel model(ck, adapter.get(), segment_size);
  ASSERT_EQ(model.first_trainable_layer(), 0);
  const Tensor hidden = model.forward(c.batch, {.for_backward = true});
  SoftcapLogpHead head(ck.weights.output, ck.config.final_logit_softcap, /*chunk=*/100);  // 4 chunks of 320
  const std::vector<float> logp = head.forward(hidden, c.batch.scored);
  double loss = 0.0;
  for (float l : logp) loss -= l;
  loss /= double(logp.size());
  EXPECT_NEAR(loss, c.loss, 1e-4 * std::abs(c.loss)) << name;
  const std::vector<float> d_logp(logp.size(), -1.0f / float(logp.size()));
  Tensor d_hidden = Tensor::zeros(DType::F32, {hidden.dim(0), hidden.dim(1)});
  head.backward(d_logp, d_hidden);
  adapter->zero_grads();
  model.backward(std::move(d_hidden));

  auto golden = formats::SafetensorsFile::open(fixture("lora/" + name + "/grads.safetensors"));
  size_t compared = 0;
  double worst = 0.0;
  for (auto& e : adapter->entries()) {
    for (const char* ab : {"lora_A", "lora_B"}) {
      const std::string key = peft_tensor_name(ck.config.base, *adapter, e.layer, e.module, ab, ck.config.multimodal);
      ASSERT_TRUE(golden->has(key)) << key;
      const double err = relative_error(ab[5] == 'A' ? e.factors->grad_a : e.factors->grad_b, golden->tensor(key));
      EXPECT_LT(err, 3e-4) << name << " " << key;
      worst = std::max(worst, err);
      ++compared;
    }
  }
  EXPECT_EQ(compared, golden->tensors().size()) << "every LoRA tensor peft made is one brioche trains";
  std::printf("%s (segment_size %d): loss %.6f (oracle %.6f), %zu gradient tensors, worst relative error %.2e\n",
              name.c_str(), segment_size, loss, c.loss, compared, worst);
}

TEST(Gemma4Train, LoraGradientsMatchPeftOnSlidingFullAndKEqV) { check_gradients("mix"); }

TEST(Gemma4Train, LoraGradientsMatchPeftOnPerLayerInputsAndKvSharing) { check_gradients("e2b"); }

TEST(Gemma4Train, LoraGradientsMatchPeftWithAttentionBias) { check_gradients("bias"); }

// LoRA grads of an adapter on the last two e2b layers (KV-shared: they read
// layers 1 and 2's K/V), through the frozen-prefix path.
std::vector<Tensor> last_layer_grads(const model::Gemma4Checkpoint& ck, LoraAdapter& adapter, const TokenBatch& batch,
                                     int expect_first) {
  Gemma4TrainModel model(ck, &adapter);
  EXPECT_EQ(model.first_trainable_layer(), expect_first);
  const Tensor prefix = model.frozen_prefix(batch);
  const Tensor hidden = model.forward(batch, prefix, {.for_backward = true});
  SoftcapLogpHead head(ck.weights.output, ck.config.final_logit_softcap, 4096);
  const std::vector<float> logp = head.forward(hidden, batch.scored);
  Tensor d_hidden = Tensor::zeros(DType::F32, {hidden.dim(0), hidden.dim(1)});
  head.backward(std::vector<float>(logp.size(), -1.0f), d_hidden);
  adapter.zero_grads();
  model.backward(std::move(d_hidden));
  std::vector<Tensor> grads;
  const int L = ck.config.base.n_layers;
  for (int l = L - 2; l < L; ++l)
    for (Module m : {Module::Q, Module::O, Module::Gate, Module::Up, Module::Down})
      grads.push_back(copy_f32(adapter.factors(l, m)->grad_a)),
          grads.push_back(copy_f32(adapter.factors(l, m)->grad_b));
  return grads;
}

TEST(Gemma4Train, FrozenPrefixStopsAtTheKvSourceOfAdaptedSharedLayers) {
  const model::Gemma4Checkpoint ck = model::load_gemma4_checkpoint(fixture("e2b"));
  const LoraOracleCase c = read_case("e2b");
  const int L = ck.config.base.n_layers;
  ASSERT_EQ(ck.config.layers[size_t(L - 2)].kv_source, 1);
  ASSERT_EQ(ck.config.layers[size_t(L - 1)].kv_source, 2);
  LoraConfig last_two;
  last_two.num_layers = 2;
  LoraAdapter partial(ck.config.base, last_two, 5, gemma4_lora_shapes(ck.config));
  // The same factors on the last two layers, and factors with B = 0 (no effect on the forward) on the others:
  // every layer then trains, from the embedding.
  LoraAdapter full(ck.config.base, LoraConfig{}, 6, gemma4_lora_shapes(ck.config));
  for (auto& e : full.entries()) {
    if (const LoraFactors* f = partial.factors(e.layer, e.module)) {
      std::copy_n(f->a.data_as<float>(), f->a.numel(), e.factors->a.data_as<float>());
      for (int64_t i = 0; i < f->b.numel(); ++i) e.factors->b.data_as<float>()[i] = 0.01f * float(i % 7 - 3);
      std::copy_n(e.factors->b.data_as<float>(), f->b.numel(), partial.factors(e.layer, e.module)->b.data_as<float>());
    }
  }
  const std::vector<Tensor> a = last_layer_grads(ck, partial, c.batch, 1);
  const std::vector<Tensor> b = last_layer_grads(ck, full, c.batch, 0);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, relative_error(a[i], b[i]));
  EXPECT_LT(worst, 1e-5);
  double size = 0.0;
  for (const Tensor& t : a)
    for (int64_t i = 0; i < t.numel(); ++i) size = std::max(size, double(std::abs(t.data_as<float>()[i])));
  EXPECT_GT(size, 1e-3) << "the gradients are not all zero";
}

TEST(Gemma4Train, LoraGradientsMatchPeftThroughTheMoeBlock) {
  // moe: a Gemma4ForConditionalGeneration with top-2 of 4 experts beside the dense MLP; gradients flow through
  // the experts and the router (transformers' router softmax runs in f32, the rest in f64).
  check_gradients("moe");
}

TEST(Gemma4Train, ExpertLoraGradientsMatchPeft) {
  // moe_experts: the moe model with peft's target_parameters on experts.gate_up_proj and experts.down_proj
  // (one rank-4 A/B pair per expert, A [E·r, in], B [out, r·E]) beside every projection; only the rows routed
  // to an expert reach its factors. The experts' factor gradients are 4 of the 54 tensors compared.
  check_gradients("moe_experts", 0, "moe");
  check_gradients("moe_experts", 2, "moe");
}

TEST(Gemma4Train, SegmentedBackwardMatchesPeft) {
  // The backward recomputes each segment from its saved residual; KV-shared layers (e2b: layers 3 and 4 read
  // layers 1 and 2) read K/V kept from an earlier segment, and their dK/dV wait for the source's segment.
  for (const char* name : {"mix", "e2b", "bias", "moe"})
    for (int segment : {1, 2, 3}) check_gradients(name, segment);
}

TEST(Gemma4Train, SegmentedBackwardEqualsTheWholeBackward) {
  // Bit for bit: the recompute runs the same ops on the same inputs with the same dropout masks.
  const model::Gemma4Checkpoint ck = model::load_gemma4_checkpoint(fixture("e2b"));
  const LoraOracleCase c = read_case("e2b");
  std::map<int, size_t> saved;  // bytes the forward kept, per segment_size
  auto grads = [&](int segment_size) {
    auto adapter = load_adapter(fixture("lora/e2b"), ck.config.base, false, 1 << 16, gemma4_lora_shapes(ck.config));
    Gemma4TrainModel model(ck, adapter.get(), segment_size);
    const Tensor hidden = model.forward(c.batch, {.dropout_seed = 7, .for_backward = true});
    saved[segment_size] = model.saved_bytes();
    SoftcapLogpHead head(ck.weights.output, ck.config.final_logit_softcap, 100);
    const std::vector<float> logp = head.forward(hidden, c.batch.scored);
    Tensor d_hidden = Tensor::zeros(DType::F32, {hidden.dim(0), hidden.dim(1)});
    head.backward(std::vector<float>(logp.size(), -1.0f), d_hidden);
    adapter->zero_grads();
    model.backward(std::move(d_hidden));
    std::vector<float> out;
    for (auto& e : adapter->entries())
      for (const Tensor* g : {&e.factors->grad_a, &e.factors->grad_b})
        out.insert(out.end(), g->data_as<float>(), g->data_as<float>() + g->numel());
    return out;
  };
  const std::vector<float> whole = grads(0);
  for (int segment : {1, 2, 4}) EXPECT_EQ(grads(segment), whole) << "segment_size " << segment;
  std::printf("e2b forward keeps %zu bytes whole, %zu / %zu / %zu with segment_size 1 / 2 / 4\n", saved[0], saved[1],
              saved[2], saved[4]);
  EXPECT_LT(saved[1] * 4, saved[0]) << "the segmented forward keeps boundaries, not every layer's activations";
}

TEST(Gemma4Train, SitesFollowEachLayersProjections) {
  // e2b: the last two layers share K/V (no k_proj, v_proj); mix: full layers take V from k_proj.
  const model::Gemma4Checkpoint e2b = model::load_gemma4_checkpoint(fixture("e2b"));
  LoraAdapter a(e2b.config.base, LoraConfig{}, 1, gemma4_lora_shapes(e2b.config));
  const int L = e2b.config.base.n_layers;
  EXPECT_EQ(a.factors(L - 1, Module::K), nullptr);
  EXPECT_EQ(a.factors(L - 1, Module::V), nullptr);
  ASSERT_NE(a.factors(L - 1, Module::Gate), nullptr);
  EXPECT_EQ(a.factors(L - 1, Module::Gate)->b.dim(0), e2b.config.layers[size_t(L - 1)].intermediate_size);
  const model::Gemma4Checkpoint mix = model::load_gemma4_checkpoint(fixture("mix"));
  LoraAdapter b(mix.config.base, LoraConfig{}, 1, gemma4_lora_shapes(mix.config));
  EXPECT_EQ(b.factors(1, Module::V), nullptr);  // layer 1 is full_attention with attention_k_eq_v
  ASSERT_NE(b.factors(1, Module::K), nullptr);
  EXPECT_EQ(b.factors(1, Module::K)->b.dim(0), 32);  // one kv head of 32
  EXPECT_THROW(LoraAdapter(mix.config.base, LoraConfig{}, std::vector<LoraAdapter::Site>{{1, Module::V}},
                           gemma4_lora_shapes(mix.config)),
               Error);
}

// The log-probs and d loss / d every LoRA factor of a preference pair as one prefix-shared forward
// ([prompt; chosen; rejected], the rejected rows masked from the chosen ones, positions restarting after the
// prompt) and as the two sequences laid out plainly (the layout the peft goldens above check).
PairRun run_pair(const model::Gemma4Checkpoint& ck, LoraAdapter& adapter, const TokenizedPair& pair, bool shared) {
  const TokenizedPair* pairs[] = {&pair};
  const TokenBatch batch =
      build_preference_batch(pairs, {.method = Method::ORPO, .sft_scope = SftScope::Response, .prefix_shared = shared});
  Gemma4TrainModel model(ck, &adapter);
  const Tensor hidden = model.forward(batch, {.for_backward = true});
  SoftcapLogpHead head(ck.weights.output, ck.config.final_logit_softcap, 100);
  PairRun out;
  out.rows = batch.n_rows();
  out.logp = head.forward(hidden, batch.scored);
  // One weight per scored token, by (sequence, target): the same loss in either layout.
  std::vector<float> d_logp;
  for (const ScoredToken& t : batch.scored)
    d_logp.push_back(t.sequence == 0 ? -0.5f : 0.25f + 0.001f * float(t.target));
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

class Gemma4PrefixShared : public ::testing::TestWithParam<std::string> {};

TEST_P(Gemma4PrefixShared, EqualsTheTwoSequencesLaidOutPlainly) {
  // The prompt (12 tokens) is longer than every fixture's sliding window (6..8), so the sliding layers' window
  // reaches back across the branch boundary from both replies; e2b's KV-shared layers read the shared K/V.
  const std::string name = GetParam();
  const model::Gemma4Checkpoint ck = model::load_gemma4_checkpoint(fixture(name));
  auto adapter = load_adapter(fixture("lora/" + name), ck.config.base, false, 1 << 16, gemma4_lora_shapes(ck.config));
  const LoraOracleCase c = read_case(name);
  ASSERT_GE(c.batch.spans.size(), 2u);
  const auto& s0 = c.batch.spans[0];
  const auto& s1 = c.batch.spans[1];
  ASSERT_GE(s1.n_rows, 21);
  const std::vector<int32_t> b(c.batch.tokens.begin() + s1.first_row,
                               c.batch.tokens.begin() + s1.first_row + s1.n_rows);
  const std::vector<int32_t> a(c.batch.tokens.begin() + s0.first_row,
                               c.batch.tokens.begin() + s0.first_row + s0.n_rows);
  const TokenizedPair pair{.prompt = {b.begin(), b.begin() + 12},
                           .chosen = {b.begin() + 12, b.begin() + 21},
                           .rejected = {a.begin() + 1, a.begin() + 8}};
  expect_prefix_shared_equals_plain(name, run_pair(ck, *adapter, pair, false), run_pair(ck, *adapter, pair, true), 12,
                                    1.0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Gemma4PrefixShared, ::testing::Values("mix", "e2b", "moe"));

}  // namespace
}  // namespace brioche::train
