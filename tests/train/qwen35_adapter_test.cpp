// Served (unmerged, per-request) LoRA adapters on Qwen 3.5 against the
// merged model (W + s·B·A, train::merge_adapter, what `--adapter` does), on
// the random-weight fixtures of tools/oracle/qwen35_oracle.py (layers
// [linear, full, linear, full]; dense and MoE): one batch mixes sequences of
// two adapters (A: rank 8 on every projection peft targets on the model:
// q/k/v/o on the full-attention layers, in_proj_qkv/z/b/a and out_proj on
// the Gated DeltaNet layers, gate/up/down on the dense MLP; B: rank 4,
// rsLoRA, on q_proj, in_proj_z, out_proj and down_proj where present) and of
// the base, a prefill of prompts crossing the delta rule's 16-row chunks,
// then decode steps; every sequence's logits equal those of the model with
// its adapter merged (or none) run alone. The factors lie on the f16 grid
// (the served adapter's storage) and the scales are powers of two, so both
// models hold the same adapter and only the arithmetic differs. On CUDA the
// same batch runs against the CPU (skipped without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "core/half.h"
#include "model/model.h"
#include "model/qwen35.h"
#include "ops/device.h"
#include "train/adapter_io.h"
#include "train/qwen35_train_model.h"
#include "train/train_base.h"
#include "train/served_plans.h"

namespace brioche::train {
namespace {

std::string fixture(const std::string& name) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/qwen35/" + name;
}

// Random factors on the f16 grid for the projections of `targets` the model's layers have.
std::unique_ptr<LoraAdapter> random_adapter(const model::Model& m, LoraConfig lora, uint64_t seed) {
  auto adapter = std::make_unique<LoraAdapter>(m.config(), lora, seed, lora_shapes_of(m));
  std::mt19937 rng{uint32_t(seed)};
  std::normal_distribution<float> normal(0.0f, 0.02f);
  auto to_f16_grid = [](float v) { return f16_to_f32(f32_to_f16(v)); };
  for (auto& e : adapter->entries()) {
    for (int64_t i = 0; i < e.factors->b.numel(); ++i) e.factors->b.data_as<float>()[i] = to_f16_grid(normal(rng));
    for (int64_t i = 0; i < e.factors->a.numel(); ++i)
      e.factors->a.data_as<float>()[i] = to_f16_grid(e.factors->a.data_as<float>()[i]);
  }
  return adapter;
}

std::unique_ptr<model::Model> merged_model(const std::string& name, const LoraAdapter* adapter) {
  model::LoadOptions options;
  if (adapter)
    options.adjust_qwen35_checkpoint = [adapter](model::Qwen35Checkpoint& ck) { merge_adapter(ck, *adapter); };
  return model::Model::load(fixture(name), std::move(options));
}

using testing::Plan;

// The plans through m's forward together (served_plans.h).
std::vector<std::vector<float>> run(model::Model& m, const std::vector<Plan>& plans) {
  return testing::run_plans(m, plans, {.block_size = 16, .n_blocks = 64});
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double err = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    err = std::max(err, std::abs(double(a[i]) - double(b[i])));
  }
  return err;
}

std::vector<int32_t> tokens(int32_t first, int32_t count, int32_t vocab) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < count; ++i) ids.push_back((first + 37 * i) % vocab);
  return ids;
}

// Unmerged against merged, f32 throughout (logits std ~0.8): the merged
// weight rounds W + s·B·A once more, and the two sum in other orders.
// Measured max abs error, dense / moe: 1.9e-5 / 1.2e-5, where the adapters
// move the logits by 3.2 / 3.8 (with factors 2.5x larger, moving them by
// 4.5, the moe's grew to 1.5e-4: the router amplifies); the base rows
// beside the adapters' are bit-identical.
constexpr double kTolerance = 2e-4;

struct Adapters {
  std::unique_ptr<LoraAdapter> a, b;
  std::shared_ptr<model::ServedAdapter> served_a, served_b;
  explicit Adapters(const model::Model& m) {
    const bool moe = dynamic_cast<const model::Qwen35Model&>(m).qwen35_config().n_experts > 0;
    std::vector<Module> all = {Module::Q,       Module::K,       Module::V,       Module::O,        Module::LinearQkv,
                               Module::LinearZ, Module::LinearB, Module::LinearA, Module::LinearOut};
    std::vector<Module> some = {Module::Q, Module::LinearZ, Module::LinearOut};
    if (!moe) {
      all.insert(all.end(), {Module::Gate, Module::Up, Module::Down});
      some.push_back(Module::Down);
    }
    a = random_adapter(m, {.rank = 8, .alpha = 16, .targets = all}, 11);
    b = random_adapter(m, {.rank = 4, .alpha = 8, .rs_lora = true, .targets = some}, 12);
    served_a = serving_adapter(*a, Device::CPU);
    served_b = serving_adapter(*b, Device::CPU);
    served_a->name = "a";
    served_b->name = "b";
  }
};

// Four sequences: A, base, B, A (A's rows in two runs), prompts of 37, 20,
// 53 and 16 rows (across and on the 16-row chunk grid), then 3, 5, 2 and 4
// decode rows.
std::vector<Plan> plans(int32_t vocab, const model::ServedAdapter* a, const model::ServedAdapter* b) {
  return {{tokens(3, 37, vocab), tokens(500, 3, vocab), a},
          {tokens(11, 20, vocab), tokens(700, 5, vocab), nullptr},
          {tokens(5, 53, vocab), tokens(900, 2, vocab), b},
          {tokens(29, 16, vocab), tokens(1100, 4, vocab), a}};
}

class Qwen35ServedAdapter : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen35ServedAdapter, MixedBatchEqualsMergedModels) {
  const std::string name = GetParam();
  auto base = model::Model::load(fixture(name));
  const Adapters ad(*base);
  auto merged_a = merged_model(name, ad.a.get()), merged_b = merged_model(name, ad.b.get());
  const int32_t vocab = int32_t(base->config().vocab_size);
  const std::vector<Plan> mixed = plans(vocab, ad.served_a.get(), ad.served_b.get());
  const auto got = run(*base, mixed);
  model::Model* reference[] = {merged_a.get(), base.get(), merged_b.get(), merged_a.get()};
  double worst = 0, base_err = 0, moved = 0;
  for (size_t s = 0; s < mixed.size(); ++s) {
    Plan alone = mixed[s];
    alone.adapter = nullptr;
    const auto want = run(*reference[s], {alone})[0];
    const double err = max_abs_diff(got[s], want);
    EXPECT_LT(err, kTolerance) << "sequence " << s;
    (s == 1 ? base_err : worst) = std::max(s == 1 ? base_err : worst, err);
    if (s != 1) moved = std::max(moved, max_abs_diff(run(*base, {alone})[0], want));
  }
  std::printf(
      "%s: adapter rows within %.2e of the merged models, base rows beside them %.2e (the adapters move the "
      "logits by %.3g)\n",
      name.c_str(), worst, base_err, moved);
  EXPECT_EQ(base_err, 0.0) << "base rows beside adapter rows are the base model's";
  EXPECT_GT(moved, 1e-2) << "the adapters change the model (the comparison is not vacuous)";
}

TEST_P(Qwen35ServedAdapter, EveryTargetIsServed) {
  // serving_adapter keeps every module peft targets (none is refused or
  // dropped): the twelve projections, and on a MoE model its shared
  // expert's gate/up/down (Projection::Gate/Up/Down there), its
  // shared_expert_gate and the experts' two parameters (ServedAdapter::experts;
  // served_expert_adapter_test.cpp checks their arithmetic).
  auto m = model::Model::load(fixture(GetParam()));
  const Adapters ad(*m);
  const model::ServedAdapter& s = *ad.served_a;
  int served = 0;
  for (const auto& e : ad.a->entries()) {
    const model::AdapterProjection* p = s.projection(e.layer, model::Projection(int(e.module)));
    ASSERT_NE(p, nullptr) << module_name(e.module) << " of layer " << e.layer;
    EXPECT_EQ(p->a.dim(1), e.factors->a.dim(1));
    EXPECT_EQ(p->bt.dim(1), e.factors->b.dim(0));
    ++served;
  }
  EXPECT_EQ(served, GetParam() == "moe" ? 2 * 5 + 2 * 4 : 2 * 5 + 2 * 4 + 4 * 3);
  if (GetParam() == "moe") {
    const LoraShapes shapes = lora_shapes_of(*m);
    EXPECT_EQ(shapes(1, Module::Gate).in, m->config().hidden_size);
    const int64_t n_experts = shapes(1, Module::ExpertDown).experts;
    for (Module mod :
         {Module::Gate, Module::Down, Module::ExpertGateUp, Module::ExpertDown, Module::SharedExpertGate}) {
      const auto adapter = random_adapter(*m, {.rank = 4, .alpha = 8, .targets = {Module::Q, mod}}, 13);
      const auto served_mod = serving_adapter(*adapter, Device::CPU);
      for (int l = 0; l < m->config().n_layers; ++l) {
        if (mod == Module::ExpertGateUp || mod == Module::ExpertDown) {
          ASSERT_EQ(int64_t(served_mod->experts[size_t(l)].size()), n_experts) << module_name(mod);
          const model::AdapterExpert& e = served_mod->experts[size_t(l)][0];
          EXPECT_EQ(e.gate.a.defined(), mod == Module::ExpertGateUp);
          EXPECT_EQ(e.down.a.defined(), mod == Module::ExpertDown);
        } else {
          const model::Projection p =
              mod == Module::SharedExpertGate ? model::Projection::SharedExpertGate : model::Projection(int(mod));
          EXPECT_NE(served_mod->projection(l, p), nullptr) << module_name(mod) << " of layer " << l;
        }
      }
    }
  }
}

TEST_P(Qwen35ServedAdapter, AnAdapterForAnotherShapeFailsNamingTheProjection) {
  auto m = model::Model::load(fixture(GetParam()));
  const Adapters ad(*m);
  model::ServedAdapter wrong = *ad.served_b;
  model::AdapterProjection& z = wrong.layers[0][size_t(model::Projection::LinearZ)];
  z.a = Tensor::zeros(DType::F16, {4, m->config().hidden_size + 1});
  std::vector<Plan> p = plans(int32_t(m->config().vocab_size), &wrong, nullptr);
  p.resize(1);
  try {
    run(*m, p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in_proj_z of layer 0"), std::string::npos) << e.what();
  }
}

class CudaQwen35ServedAdapter : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaQwen35ServedAdapter, MixedBatchMatchesTheCpu) {
  if (!ops::cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  const std::string name = GetParam();
  auto cpu = model::Model::load(fixture(name));
  auto gpu = model::Model::load(fixture(name), {.device = Device::CUDA});
  const Adapters ad(*cpu);
  const auto gpu_a = model::copy_to_device(*ad.served_a, Device::CUDA),
             gpu_b = model::copy_to_device(*ad.served_b, Device::CUDA);
  const int32_t vocab = int32_t(cpu->config().vocab_size);
  const auto want = run(*cpu, plans(vocab, ad.served_a.get(), ad.served_b.get()));
  const auto got = run(*gpu, plans(vocab, gpu_a.get(), gpu_b.get()));
  double worst = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    const double err = max_abs_diff(got[s], want[s]);
    EXPECT_LT(err, 2e-4) << "sequence " << s;  // the CUDA model's tolerance against the CPU (cuda_qwen35_test.cpp)
    worst = std::max(worst, err);
  }
  std::printf("%s on CUDA: mixed adapter batch within %.2e of the CPU\n", name.c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen35ServedAdapter, ::testing::Values("dense", "moe"));
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaQwen35ServedAdapter, ::testing::Values("dense", "moe"));

}  // namespace
}  // namespace brioche::train
