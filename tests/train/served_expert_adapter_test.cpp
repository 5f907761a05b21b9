// Adapters with LoRA on the MoE experts (peft's target_parameters
// experts.gate_up_proj / experts.down_proj) and on Qwen 3.5 MoE's shared
// expert (gate/up/down_proj, shared_expert_gate), served unmerged per
// request (what `serve --lora` does), on the moe fixtures of Gemma 4 and
// Qwen 3.5 (tools/oracle/{gemma4,qwen35}_lora_oracle.py, lora/moe_experts:
// peft's random non-zero adapter on every projection and both expert
// parameters; logits.f32 are peft's adapted logits of the case's first
// sequence, f64 forward):
//   - one batch mixes sequences of that adapter (P), the base and a second
//     adapter (Q: rank 2, only the experts' parameters, and on
//     Qwen 3.5 the shared expert's down_proj and shared_expert_gate), a
//     prefill then decode steps; every sequence's logits equal those of the
//     model with its adapter merged (train::merge_adapter, what `--adapter`
//     does) run alone, the base rows the base model's bit for bit. Factors
//     lie on the f16 grid (the served storage), so both hold one adapter;
//   - P's prompt rows against peft's logits (f32 factors there);
//   - an adapter for another model: an expert count or an expert factor's
//     shape that the model does not have fails in one line naming the
//     tensor (at load) or the parameter, layer and expert (in the forward).
// On CUDA the same batch against the CPU (skipped without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "core/half.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "ops/device.h"
#include "train/adapter_io.h"
#include "train/lora_tensors.h"
#include "train/train_base.h"
#include "train/served_plans.h"

namespace brioche::train {
namespace {

std::string fixture(const std::string& family, const std::string& path) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/" + family + "/" + path;
}

void round_to_f16(Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = f16_to_f32(f32_to_f16(t.data_as<float>()[i]));
}

// P: peft's adapter of lora/moe_experts, its factors rounded to f16 (its scale 8/4 = 2 is exact).
std::unique_ptr<LoraAdapter> peft_adapter(const std::string& family, const model::Model& m) {
  auto a = load_adapter(fixture(family, "lora/moe_experts"), m.config(), false, 1 << 16, lora_shapes_of(m));
  round_to_f16(a->flat().a);
  round_to_f16(a->flat().b);
  return a;
}

// Q: random factors on the f16 grid, rank 2, scale 2 (a power of two: s·B stays on the grid), on the experts
// only (and the shared expert's down and gate on Qwen 3.5).
std::unique_ptr<LoraAdapter> expert_only_adapter(const std::string& family, const model::Model& m) {
  std::vector<Module> targets = {Module::ExpertGateUp, Module::ExpertDown};
  if (family == "qwen35") targets.insert(targets.end(), {Module::Down, Module::SharedExpertGate});
  auto adapter = std::make_unique<LoraAdapter>(m.config(), LoraConfig{.rank = 2, .alpha = 4, .targets = targets}, 21,
                                               lora_shapes_of(m));
  std::mt19937 rng{21};
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (auto& e : adapter->entries())
    for (int64_t i = 0; i < e.factors->b.numel(); ++i) e.factors->b.data_as<float>()[i] = normal(rng);
  round_to_f16(adapter->flat().a);
  round_to_f16(adapter->flat().b);
  return adapter;
}

std::unique_ptr<model::Model> merged_model(const std::string& family, const LoraAdapter* adapter) {
  model::LoadOptions options;
  if (adapter) {
    options.adjust_gemma4_checkpoint = [adapter](model::Gemma4Checkpoint& ck) { merge_adapter(ck, *adapter); };
    options.adjust_qwen35_checkpoint = [adapter](model::Qwen35Checkpoint& ck) { merge_adapter(ck, *adapter); };
  }
  return model::Model::load(fixture(family, "moe"), std::move(options));
}

using testing::Plan;

// The plans through m's forward together (served_plans.h).
std::vector<std::vector<float>> run(model::Model& m, const std::vector<Plan>& plans) {
  return testing::run_plans(m, plans, {.block_size = 4, .n_blocks = 128});
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b, size_t n = SIZE_MAX) {
  EXPECT_TRUE(n != SIZE_MAX || a.size() == b.size());
  double err = 0;
  for (size_t i = 0; i < std::min({a.size(), b.size(), n}); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    err = std::max(err, std::abs(double(a[i]) - double(b[i])));
  }
  return err;
}

struct Golden {
  std::vector<int32_t> ids;
  std::vector<float> logits;  // peft's, [ids.size(), vocab]
};

Golden read_golden(const std::string& family) {
  std::ifstream in(fixture(family, "lora/moe_experts/case.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  Golden g;
  g.ids = j["sequences"][0].get<std::vector<int32_t>>();
  g.logits.resize(g.ids.size() * j["vocab"].get<size_t>());
  std::ifstream f(fixture(family, "lora/moe_experts/logits.f32"), std::ios::binary);
  f.read(reinterpret_cast<char*>(g.logits.data()), std::streamsize(g.logits.size() * 4));
  EXPECT_TRUE(f.good()) << family;
  return g;
}

std::vector<int32_t> tokens(int32_t first, int32_t count, int32_t vocab) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < count; ++i) ids.push_back((first + 37 * i) % (vocab - 3) + 3);
  return ids;
}

// P on peft's sequence (then 3 decodes), the base, Q, P again: 4 sequences, the last three's prompts 11, 17, 6.
std::vector<Plan> plans(const Golden& g, int32_t vocab, const model::ServedAdapter* p, const model::ServedAdapter* q) {
  return {{g.ids, tokens(500, 3, vocab), p},
          {tokens(11, 11, vocab), tokens(700, 4, vocab), nullptr},
          {tokens(5, 17, vocab), tokens(900, 2, vocab), q},
          {tokens(29, 6, vocab), tokens(1100, 4, vocab), p}};
}

struct Adapters {
  std::unique_ptr<LoraAdapter> p, q;
  std::shared_ptr<model::ServedAdapter> served_p, served_q;
  Adapters(const std::string& family, const model::Model& m)
      : p(peft_adapter(family, m)), q(expert_only_adapter(family, m)) {
    served_p = serving_adapter(*p, Device::CPU);
    served_q = serving_adapter(*q, Device::CPU);
    served_p->name = "p";
    served_q->name = "q";
  }
};

class ServedExpertAdapter : public ::testing::TestWithParam<std::string> {};

// Unmerged against merged, f32 throughout: the merged weight rounds
// W + s·B·A once more and the sums run in other orders. Measured max abs
// error, gemma4 / qwen35: 4.5e-5 / 3.1e-5, where P moves the logits by ~10
// and Q by 6.9 / 3.7.
constexpr double kTolerance = 2e-4;

TEST_P(ServedExpertAdapter, MixedBatchEqualsMergedModels) {
  const std::string family = GetParam();
  auto base = merged_model(family, nullptr);
  const Adapters ad(family, *base);
  auto merged_p = merged_model(family, ad.p.get()), merged_q = merged_model(family, ad.q.get());
  const Golden g = read_golden(family);
  const int32_t vocab = int32_t(base->config().vocab_size);
  const std::vector<Plan> mixed = plans(g, vocab, ad.served_p.get(), ad.served_q.get());
  const auto got = run(*base, mixed);
  model::Model* reference[] = {merged_p.get(), base.get(), merged_q.get(), merged_p.get()};
  double worst = 0, base_err = 0, moved_q = 0;
  for (size_t s = 0; s < mixed.size(); ++s) {
    Plan alone = mixed[s];
    alone.adapter = nullptr;
    const auto want = run(*reference[s], {alone})[0];
    const double err = max_abs_diff(got[s], want);
    EXPECT_LT(err, kTolerance) << "sequence " << s;
    (s == 1 ? base_err : worst) = std::max(s == 1 ? base_err : worst, err);
    if (s == 2) moved_q = max_abs_diff(run(*base, {alone})[0], want);
  }
  const double peft_err = max_abs_diff(got[0], g.logits, g.logits.size());
  std::printf(
      "%s: adapter rows within %.2e of the merged models (P's prompt %.2e from peft's f32 factors), base rows "
      "beside them %.2e; the expert-only adapter moves the logits by %.3g\n",
      family.c_str(), worst, peft_err, base_err, moved_q);
  EXPECT_EQ(base_err, 0.0) << "base rows beside adapter rows are the base model's";
  EXPECT_GT(moved_q, 1e-2) << "the experts' factors change the model (the comparison is not vacuous)";
  EXPECT_LT(peft_err, 0.2);  // f16 factors against peft's f32 (Gemma4Adapter's bound)
}

TEST_P(ServedExpertAdapter, EveryExpertFactorIsServed) {
  const std::string family = GetParam();
  auto m = merged_model(family, nullptr);
  const Adapters ad(family, *m);
  const model::ServedAdapter& s = *ad.served_p;
  const int64_t n_experts = lora_shapes_of(*m)(0, Module::ExpertDown).experts;
  for (int l = 0; l < m->config().n_layers; ++l) {
    ASSERT_EQ(int64_t(s.experts[size_t(l)].size()), n_experts) << "layer " << l;
    for (const model::AdapterExpert& e : s.experts[size_t(l)]) {
      EXPECT_TRUE(e.gate.a.defined() && e.up.a.defined() && e.down.a.defined());
      EXPECT_EQ(e.gate.a.data(), e.up.a.data()) << "gate and up share A_e";
      EXPECT_EQ(e.gate.bt.dim(0), 4);
    }
    if (family == "qwen35") {
      for (model::Projection p : {model::Projection::Gate, model::Projection::Up, model::Projection::Down,
                                  model::Projection::SharedExpertGate})
        EXPECT_NE(s.projection(l, p), nullptr) << model::projection_name(p) << " of layer " << l;
      EXPECT_EQ(s.projection(l, model::Projection::SharedExpertGate)->bt.dim(1), 1);
    }
  }
  // Each distinct factor once: A and B of every module, A_e shared by gate and up.
  size_t want = 0;
  for (const auto& e : ad.p->entries()) want += size_t(e.factors->a.numel() + e.factors->b.numel()) * 2;
  EXPECT_EQ(s.bytes(), want);
  // A copy for a device keeps every expert and the sharing.
  const auto copy = model::copy_to_device(s, Device::CPU);
  ASSERT_EQ(copy->experts.size(), s.experts.size());
  EXPECT_EQ(copy->bytes(), want);
  EXPECT_EQ(copy->experts[1][2].gate.a.data(), copy->experts[1][2].up.a.data());
}

// y = x·Wᵀ-free terms of the expert parts for a hand-made ExpertRows, in double from the f16 factors.
TEST(ServedExpertFactors, Q8_0FactorsGiveTheF16TermsWithinTheirRounding) {
  // One layer, 2 experts, in 64, I 32, rank 4: every factor row whole Q8_0 blocks.
  std::mt19937 rng{5};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto f16 = [&](int64_t rows, int64_t cols) {
    Tensor t = Tensor::zeros(DType::F16, {rows, cols});
    for (int64_t i = 0; i < rows * cols; ++i) t.data_as<uint16_t>()[i] = f32_to_f16(normal(rng));
    return t;
  };
  model::ServedAdapter adapter;
  adapter.name = "q8";
  adapter.rank = 4;
  adapter.layers.resize(1);
  adapter.experts.resize(1);
  for (int e = 0; e < 2; ++e) {
    const Tensor a = f16(4, 64);
    adapter.experts[0].push_back({.gate = {.a = a, .bt = f16(4, 32)},
                                  .up = {.a = a, .bt = f16(4, 32)},
                                  .down = {.a = f16(4, 32), .bt = f16(4, 64)}});
  }
  const auto q8 = model::with_q8_0_factors(adapter);
  const model::AdapterExpert& e0 = q8->experts[0][0];
  EXPECT_EQ(e0.gate.a.dtype(), DType::Q8_0);
  EXPECT_EQ(e0.down.bt.dtype(), DType::Q8_0);
  EXPECT_EQ(e0.gate.a.data(), e0.up.a.data()) << "gate and up keep one A_e";
  EXPECT_LT(q8->bytes(), adapter.bytes());

  // Batch rows 0..3 under the adapter, row 4 the base; expert 0 takes rows 0, 2, 4, expert 1 rows 1, 2, 3.
  const std::vector<int32_t> batch_rows = {0, 2, 4, 1, 2, 3};
  const std::vector<int64_t> first = {0, 3, 6};
  const model::ExpertRows layout{.layer = 0, .batch_rows = batch_rows, .expert_first = first};
  Tensor x = Tensor::zeros(DType::F32, {6, 64}), act = Tensor::zeros(DType::F32, {6, 32});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = normal(rng);
  for (int64_t i = 0; i < act.numel(); ++i) act.data_as<float>()[i] = normal(rng);
  Tensor u = Tensor::zeros(DType::F32, {6, 4});
  double scale = 0, worst_f16 = 0, worst_q8 = 0;
  for (const model::ServedAdapter* ad : {&adapter, q8.get()}) {
    const std::vector<model::AdapterRows> rows = {{.first_row = 0, .n_rows = 4, .adapter = ad}};
    Tensor gate_up = Tensor::zeros(DType::F32, {6, 64}), down = Tensor::zeros(DType::F32, {6, 64});
    Tensor gate = gate_up.slice(1, 0, 32), up = gate_up.slice(1, 32, 64);
    model::add_expert_gate_up_adapter_rows(rows, layout, x, gate, up, u);
    model::add_expert_adapter_rows(rows, layout, model::Projection::Down, act, down, u);
    for (int64_t i = 0; i < 6; ++i) {
      const int e = i < 3 ? 0 : 1;
      const bool adapted = batch_rows[size_t(i)] < 4;
      const model::AdapterExpert& f = adapter.experts[0][size_t(e)];
      const auto term = [&](const Tensor& in, const model::AdapterProjection& p, int64_t o) {
        double sum = 0;
        for (int64_t k = 0; k < 4; ++k) {
          double uk = 0;
          for (int64_t c = 0; c < in.dim(1); ++c)
            uk += double(in.row_as<float>(i)[c]) * f16_to_f32(p.a.row_as<uint16_t>(k)[c]);
          sum += uk * f16_to_f32(p.bt.row_as<uint16_t>(k)[o]);
        }
        return adapted ? sum : 0.0;
      };
      for (int64_t o = 0; o < 64; ++o) {
        const double want_gu = o < 32 ? term(x, f.gate, o) : term(x, f.up, o - 32), want_d = term(act, f.down, o);
        scale = std::max({scale, std::abs(want_gu), std::abs(want_d)});
        const double err =
            std::max(std::abs(gate_up.row_as<float>(i)[o] - want_gu), std::abs(down.row_as<float>(i)[o] - want_d));
        (ad == &adapter ? worst_f16 : worst_q8) = std::max(ad == &adapter ? worst_f16 : worst_q8, err);
      }
    }
  }
  std::printf("expert terms: f16 factors within %.2e, Q8_0 within %.2e of the double terms (largest %.3g)\n", worst_f16,
              worst_q8, scale);
  EXPECT_LT(worst_f16, 1e-5 * scale);
  EXPECT_LT(worst_q8, 2e-2 * scale);  // Q8_0 rounds each factor to ~0.4% of its block's largest value
}

// An adapter file for the family's moe fixture with `edit` applied to its tensors.
std::string edited_adapter(const std::string& family, const std::string& name,
                           const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  const std::string dir = ::testing::TempDir() + "/h21_" + family + "_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(fixture(family, "lora/moe_experts/adapter_config.json"), dir + "/adapter_config.json");
  auto file = formats::SafetensorsFile::open(fixture(family, "lora/moe_experts/adapter_model.safetensors"));
  std::map<std::string, Tensor> tensors;
  for (const auto& t : file->tensors()) tensors[t.name] = file->tensor(t.name);
  edit(tensors);
  formats::SafetensorsWriter writer;
  for (auto& [n, t] : tensors) writer.add(n, t);
  writer.write(dir + "/adapter_model.safetensors");
  return dir;
}

std::string load_error(const std::string& dir, const model::Model& m) {
  try {
    serving_adapter(*load_adapter(dir, m.config(), false, 1 << 16, lora_shapes_of(m)), Device::CPU);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The name of layer 1's expert factor ab ("lora_A"/"lora_B") of the parameter peft wraps outermost
// (experts.down_proj with both targeted) or innermost (gate_up_proj: experts.base_layer).
std::string expert_tensor(const std::string& family, bool gate_up, const std::string& ab) {
  const std::string layers =
      family == "gemma4" ? "base_model.model.model.language_model.layers.1." : "base_model.model.model.layers.1.";
  return layers + (family == "gemma4" ? "experts" : "mlp.experts") + (gate_up ? ".base_layer." : ".") + ab + ".weight";
}

TEST_P(ServedExpertAdapter, AnAdapterForAnotherModelFailsNamingTheTensor) {
  const std::string family = GetParam();
  auto m = merged_model(family, nullptr);
  // One expert fewer: A [(E − 1)·r, in] and B [out, r·(E − 1)].
  const std::string a_name = expert_tensor(family, false, "lora_A"), b_name = expert_tensor(family, false, "lora_B");
  const std::string fewer = edited_adapter(family, "fewer_experts", [&](std::map<std::string, Tensor>& t) {
    t[a_name] = copy_f32(t[a_name].slice(0, 0, t[a_name].dim(0) - 4));
    t[b_name] = copy_f32(t[b_name].slice(1, 0, t[b_name].dim(1) - 4));
  });
  const std::string fewer_error = load_error(fewer, *m);
  EXPECT_NE(fewer_error.find("'" + a_name + "' expected shape"), std::string::npos) << fewer_error;
  // gate_up_proj's B for another intermediate size.
  const std::string gu = expert_tensor(family, true, "lora_B");
  const std::string wider = edited_adapter(family, "wider_gate_up", [&](std::map<std::string, Tensor>& t) {
    t[gu] = Tensor::zeros(DType::F32, {t[gu].dim(0) + 2, t[gu].dim(1)});
  });
  const std::string wider_error = load_error(wider, *m);
  EXPECT_NE(wider_error.find("'" + gu + "' expected shape"), std::string::npos) << wider_error;
  EXPECT_EQ(fewer_error.find('\n'), std::string::npos) << "one line";
  std::printf("%s: %s\n%s: %s\n", family.c_str(), fewer_error.c_str(), family.c_str(), wider_error.c_str());

  // A served adapter built for another model reaches the forward: refused naming the parameter.
  const Adapters ad(family, *m);
  const Golden g = read_golden(family);
  model::ServedAdapter three = *ad.served_q;
  three.experts[0].pop_back();
  std::vector<Plan> p = plans(g, int32_t(m->config().vocab_size), &three, nullptr);
  p.resize(1);
  try {
    run(*m, p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts.gate_up_proj of layer 0 has factors for 3 experts, the model 4"),
              std::string::npos)
        << e.what();
  }
  model::ServedAdapter narrow = *ad.served_q;
  for (model::AdapterExpert& e : narrow.experts[1]) e.down.bt = Tensor::zeros(DType::F16, {2, 5});
  p = plans(g, int32_t(m->config().vocab_size), &narrow, nullptr);
  p.resize(1);
  try {
    run(*m, p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts.down_proj of layer 1 (expert "), std::string::npos) << e.what();
  }
}

TEST_P(ServedExpertAdapter, CudaMixedBatchMatchesTheCpu) {
  if (!ops::cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  const std::string family = GetParam();
  auto cpu = merged_model(family, nullptr);
  auto gpu = model::Model::load(fixture(family, "moe"), {.device = Device::CUDA});
  const Adapters ad(family, *cpu);
  const auto gpu_p = model::copy_to_device(*ad.served_p, Device::CUDA),
             gpu_q = model::copy_to_device(*ad.served_q, Device::CUDA);
  const Golden g = read_golden(family);
  const int32_t vocab = int32_t(cpu->config().vocab_size);
  const auto want = run(*cpu, plans(g, vocab, ad.served_p.get(), ad.served_q.get()));
  const auto got = run(*gpu, plans(g, vocab, gpu_p.get(), gpu_q.get()));
  double worst = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    const double err = max_abs_diff(got[s], want[s]);
    EXPECT_LT(err, 1e-2) << "sequence " << s;  // P moves the logits by ~10: relative 1e-3
    worst = std::max(worst, err);
  }
  std::printf("%s on CUDA: mixed expert-adapter batch within %.2e of the CPU\n", family.c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Families, ServedExpertAdapter, ::testing::Values("gemma4", "qwen35"));

}  // namespace
}  // namespace brioche::train
