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
// On CUDA the same batch against the CPU in f32, and Gemma 4's expert block
// with those adapters replayed op by op on both devices in f32 and in the
// stored bf16 (skipped without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "core/error.h"
#include "core/half.h"
#include "formats/safetensors.h"
#include "model/gemma4_weights.h"
#include "model/model.h"
#include "ops/device.h"
#include "ops/gather_rows.h"
#include "ops/gelu_tanh.h"
#include "ops/matmul.h"
#include "ops/moe.h"
#include "ops/quantize.h"
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

std::unique_ptr<model::Model> merged_model(const std::string& family, const LoraAdapter* adapter,
                                           std::optional<DType> convert_weights = std::nullopt) {
  model::LoadOptions options{.convert_weights = convert_weights};
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

// Both with f32 weights (LoadOptions::convert_weights, exact for gemma4's
// bf16 fixture; qwen35's is f32): with bf16 weights the GPU's GEMMs above 8
// rows read x rounded to bf16 (docs/cuda.md), which these random models
// amplify to tenths and units (gemma4 on an H100: 2.71 on P's prompt, 0.17
// on the base beside it; ServedExpertAdapterOps replays the expert block op
// by op in both dtypes). In f32 a wrong kernel still stands out.
TEST_P(ServedExpertAdapter, CudaMixedBatchMatchesTheCpu) {
  if (!ops::cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  const std::string family = GetParam();
  auto cpu = merged_model(family, nullptr, DType::F32);
  auto gpu = model::Model::load(fixture(family, "moe"), {.convert_weights = DType::F32, .device = Device::CUDA});
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

// Gemma4Model::experts_with_adapters' ops (src/model/gemma4.cpp) replayed
// one by one on CUDA and on the CPU, in the model's buffer layout, on layer
// 0 of the gemma4 moe fixture with P and Q: the routed rows gathered by
// expert (each row twice, not adjacent), each expert's gate/up matmul into
// its row range of one [total, 2I] buffer (ranges from row > 0), the
// adapters' gate and up terms on its column halves (lora_rows_add, ldy 2I),
// gelu_tanh_mul of the halves, the down matmul into row ranges, the down
// terms, scale_rows and scatter_add_rows (each destination twice). Two
// batches: the mixed prefill's layout (P 11 rows, the base 11, Q 17, P 6:
// the experts' matmuls are GEMMs) and a decode step's (one row each:
// GEMVs). After each op its output is compared with the CPU's, chained (the
// GPU's own inputs, as in the forward) and alone (the GPU's buffers reset to
// the CPU's before the op); the first op off names the culprit of a CUDA/CPU
// mismatch of the whole model.
//
// Bounds, relative to the op's largest output: f32 weights 1e-4 (summation
// order, tanhf); bf16 weights 2e-2, as GEMMs above 8 rows read x rounded to
// bf16 (2^-9 relative per term). A wrong row, column or stride is off by
// the outputs' own size.
struct ExpertOpsCase {
  std::string name;
  std::vector<int32_t> run_rows;  // rows of each batch run: P, the base, Q, P
};

// The forward's buffers (f32): total = the batch's (row, expert) pairs, r = the largest adapter rank.
struct ExpertOpBuffers {
  Tensor in;       // [total, hidden] routed rows gathered by expert
  Tensor gate_up;  // [total, 2I]     gate columns, then up
  Tensor act;      // [total, I]
  Tensor y;        // [total, hidden]
  Tensor u;        // [total, r]      lora_rows_add's x·Aᵀ
  Tensor out;      // [n, hidden]
};
constexpr Tensor ExpertOpBuffers::*kExpertOpBuffers[] = {&ExpertOpBuffers::in,  &ExpertOpBuffers::gate_up,
                                                         &ExpertOpBuffers::act, &ExpertOpBuffers::y,
                                                         &ExpertOpBuffers::u,   &ExpertOpBuffers::out};

// What one device's replay reads.
struct ExpertOpInputs {
  Tensor routed;                                 // [n, hidden]
  Tensor gate_up_w, down_w;                      // [E, 2I, hidden], [E, hidden, I]
  std::vector<model::AdapterRows> adapter_rows;  // the batch's runs with an adapter
  std::shared_ptr<model::ServedAdapter> p, q;    // (device copies that adapter_rows point to)
};

struct ExpertOp {
  std::string name;
  Tensor ExpertOpBuffers::*output;
  std::function<void(const ExpertOpInputs&, ExpertOpBuffers&)> run;
};

double max_abs(const Tensor& host) {
  double m = 0;
  for (int64_t i = 0; i < host.numel(); ++i) m = std::max(m, std::abs(double(host.data_as<float>()[i])));
  return m;
}

// max |a − b| over two same-shaped f32 tensors (any devices); ∞ at a NaN.
double max_abs_diff(const Tensor& a, const Tensor& b) {
  const Tensor ha = ops::to_device(a, Device::CPU), hb = ops::to_device(b, Device::CPU);
  double err = 0;
  for (int64_t i = 0; i < ha.numel(); ++i) {
    const double x = ha.data_as<float>()[i], y = hb.data_as<float>()[i];
    if (!std::isfinite(x) || !std::isfinite(y)) return INFINITY;
    err = std::max(err, std::abs(x - y));
  }
  return err;
}

TEST(ServedExpertAdapterOps, CudaExpertsWithAdaptersOpByOpMatchTheCpu) {
  if (!ops::cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  auto m = merged_model("gemma4", nullptr);
  const Adapters ad("gemma4", *m);
  const model::Gemma4Checkpoint ck = model::load_gemma4_checkpoint(fixture("gemma4", "moe"));
  const model::Gemma4LayerWeights& lw = ck.weights.layers[0];
  const int layer = 0, top_k = ck.config.top_k_experts, n_experts = ck.config.n_experts;
  const int64_t hidden = ck.config.base.hidden_size, I = ck.config.moe_intermediate_size;
  const int64_t rank = std::max(ad.served_p->rank, ad.served_q->rank);  // the forward's adapter_rank_
  ASSERT_EQ(lw.experts_gate_up.dtype(), DType::BF16) << "the fixture's stored dtype";

  std::string report, first_off;
  for (const ExpertOpsCase& c : {ExpertOpsCase{"prefill", {11, 11, 17, 6}}, ExpertOpsCase{"decode", {1, 1, 1, 1}}}) {
    // The batch, its routing (random router logits, the fixture's expert scales) and the forward's gathering:
    // (row, weight) pairs grouped by expert, rows ascending in each.
    int64_t n = 0;
    for (int32_t r : c.run_rows) n += r;
    std::mt19937 rng{7};
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Tensor routed = Tensor::zeros(DType::F32, {n, hidden}), logits = Tensor::zeros(DType::F32, {n, n_experts});
    for (int64_t i = 0; i < routed.numel(); ++i) routed.data_as<float>()[i] = normal(rng);
    for (int64_t i = 0; i < logits.numel(); ++i) logits.data_as<float>()[i] = normal(rng);
    const ops::MoeRouting route = ops::moe_route(logits, top_k, lw.expert_scale);
    std::vector<int32_t> rows;
    std::vector<float> weights;
    std::vector<int64_t> first(size_t(n_experts) + 1, 0);
    for (int e = 0; e < n_experts; ++e) {
      first[size_t(e)] = int64_t(rows.size());
      for (int64_t r = 0; r < n; ++r)
        for (int k = 0; k < top_k; ++k)
          if (route.expert[size_t(r * top_k + k)] == e) {
            rows.push_back(int32_t(r));
            weights.push_back(route.weight[size_t(r * top_k + k)]);
          }
    }
    first.back() = int64_t(rows.size());
    const int64_t total = int64_t(rows.size());
    const model::ExpertRows layout{.layer = layer, .batch_rows = rows, .expert_first = first};
    const int32_t runs[4] = {0, c.run_rows[0], c.run_rows[0] + c.run_rows[1],
                             c.run_rows[0] + c.run_rows[1] + c.run_rows[2]};

    const auto each_expert = [&](auto&& run) {
      for (int e = 0; e < n_experts; ++e)
        if (first[size_t(e) + 1] > first[size_t(e)]) run(e, first[size_t(e)], first[size_t(e) + 1]);
    };
    const std::vector<ExpertOp> op_list = {
        {"gather_rows (each row twice, not adjacent)", &ExpertOpBuffers::in,
         [&](const ExpertOpInputs& s, ExpertOpBuffers& b) { ops::gather_rows(s.routed, rows, b.in); }},
        {"matmul gate_up, each expert into its rows of [total, 2I]", &ExpertOpBuffers::gate_up,
         [&](const ExpertOpInputs& s, ExpertOpBuffers& b) {
           each_expert([&](int e, int64_t begin, int64_t end) {
             Tensor gu = b.gate_up.slice(0, begin, end);
             ops::matmul(b.in.slice(0, begin, end), s.gate_up_w.select(e), gu);
           });
         }},
        {"add_expert_gate_up_adapter_rows (column halves, ldy 2I)", &ExpertOpBuffers::gate_up,
         [&](const ExpertOpInputs& s, ExpertOpBuffers& b) {
           Tensor gate = b.gate_up.slice(1, 0, I), up = b.gate_up.slice(1, I, 2 * I);
           model::add_expert_gate_up_adapter_rows(s.adapter_rows, layout, b.in, gate, up, b.u);
         }},
        {"gelu_tanh_mul of the column halves", &ExpertOpBuffers::act,
         [&](const ExpertOpInputs&, ExpertOpBuffers& b) {
           ops::gelu_tanh_mul(b.gate_up.slice(1, 0, I), b.gate_up.slice(1, I, 2 * I), b.act);
         }},
        {"matmul down, each expert into its rows of [total, hidden]", &ExpertOpBuffers::y,
         [&](const ExpertOpInputs& s, ExpertOpBuffers& b) {
           each_expert([&](int e, int64_t begin, int64_t end) {
             Tensor y_e = b.y.slice(0, begin, end);
             ops::matmul(b.act.slice(0, begin, end), s.down_w.select(e), y_e);
           });
         }},
        {"add_expert_adapter_rows down", &ExpertOpBuffers::y,
         [&](const ExpertOpInputs& s, ExpertOpBuffers& b) {
           model::add_expert_adapter_rows(s.adapter_rows, layout, model::Projection::Down, b.act, b.y, b.u);
         }},
        {"scale_rows", &ExpertOpBuffers::y,
         [&](const ExpertOpInputs&, ExpertOpBuffers& b) { ops::scale_rows(b.y, weights); }},
        {"scatter_add_rows (each destination twice)", &ExpertOpBuffers::out,
         [&](const ExpertOpInputs&, ExpertOpBuffers& b) { ops::scatter_add_rows(b.y, rows, b.out); }},
    };

    for (const DType wtype : {DType::F32, DType::BF16}) {
      const auto inputs = [&](Device d) {
        ExpertOpInputs s;
        s.routed = ops::to_device(routed, d);
        const auto weight = [&](const Tensor& w) {
          return ops::to_device(wtype == DType::F32 ? ops::convert(w, DType::F32) : w, d);
        };
        s.gate_up_w = weight(lw.experts_gate_up);
        s.down_w = weight(lw.experts_down);
        s.p = model::copy_to_device(*ad.served_p, d);
        s.q = model::copy_to_device(*ad.served_q, d);
        s.adapter_rows = {{.first_row = runs[0], .n_rows = c.run_rows[0], .adapter = s.p.get()},
                          {.first_row = runs[2], .n_rows = c.run_rows[2], .adapter = s.q.get()},
                          {.first_row = runs[3], .n_rows = c.run_rows[3], .adapter = s.p.get()}};
        return s;
      };
      const auto buffers = [&](Device d) {
        return ExpertOpBuffers{.in = ops::zeros(DType::F32, {total, hidden}, d),
                               .gate_up = ops::zeros(DType::F32, {total, 2 * I}, d),
                               .act = ops::zeros(DType::F32, {total, I}, d),
                               .y = ops::zeros(DType::F32, {total, hidden}, d),
                               .u = ops::zeros(DType::F32, {total, rank}, d),
                               .out = ops::zeros(DType::F32, {n, hidden}, d)};
      };
      const ExpertOpInputs cpu_in = inputs(Device::CPU), gpu_in = inputs(Device::CUDA);
      ExpertOpBuffers cpu = buffers(Device::CPU), chained = buffers(Device::CUDA), alone = buffers(Device::CUDA);
      const double bound = wtype == DType::F32 ? 1e-4 : 2e-2;
      char line[256];
      std::snprintf(line, sizeof line, "%s, %s weights (%lld rows, %lld pairs; bound %.0e of the largest output):\n",
                    c.name.c_str(), std::string(dtype_name(wtype)).c_str(), (long long)n, (long long)total, bound);
      report += line;
      for (const ExpertOp& op : op_list) {
        for (Tensor ExpertOpBuffers::*t : kExpertOpBuffers) ops::copy(cpu.*t, alone.*t);
        op.run(cpu_in, cpu);
        op.run(gpu_in, chained);
        op.run(gpu_in, alone);
        const double scale = std::max(max_abs(cpu.*op.output), 1e-30);
        const double err_chained = max_abs_diff(chained.*op.output, cpu.*op.output) / scale;
        const double err_alone = max_abs_diff(alone.*op.output, cpu.*op.output) / scale;
        const bool off = !(err_chained <= bound && err_alone <= bound);
        std::snprintf(line, sizeof line, "  %-58s chained %.2e  alone %.2e  (largest %.3g)%s\n", op.name.c_str(),
                      err_chained, err_alone, scale, off ? "  <- OFF" : "");
        report += line;
        if (off && first_off.empty()) first_off = c.name + ", " + std::string(dtype_name(wtype)) + ": " + op.name;
      }
    }
  }
  std::printf("gemma4 experts_with_adapters on CUDA against the CPU, op by op (max |diff| / max |cpu|):\n%s",
              report.c_str());
  EXPECT_TRUE(first_off.empty()) << "first op off: " << first_off << "\n" << report;
}

INSTANTIATE_TEST_SUITE_P(Families, ServedExpertAdapter, ::testing::Values("gemma4", "qwen35"));

}  // namespace
}  // namespace brioche::train
