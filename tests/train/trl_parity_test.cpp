// brioche's first training step against TRL's own trainers on the same model,
// adapter and data (tools/oracle/trl_goldens.py: DPOTrainer sigmoid and ipo,
// DPOTrainer sigmoid + sft weighted 0.5 = DPO with rpo_alpha 0.5 ("dpo_rpo"),
// ipo + sft weighted 2 = IPO with rpo_alpha 2 ("ipo_rpo"),
// ORPOTrainer, CPOTrainer simpo; TRL 1.16, f32 on the CPU).
//
// The model is the tiny golden Llama, the adapter PEFT's default init (A
// Kaiming-uniform, B = 0) saved by peft and warm-started here, so at step 0
// the policy equals the reference on both sides. Four pairs form one batch.
//
//  - metrics: the first step's line of log.jsonl (a real Trainer run) carries
//    the loss and every metric TRL logged under TRL's name, each within
//    1e-5 relative + 1e-6 absolute (both sides f32; measured ≤ 9e-7 relative).
//  - gradients: the LoRA gradients of that step (objective level, the same
//    path the trainer runs) against what TRL's optimizer received
//    (on_pre_optimizer_step), every tensor within 1e-4 relative L2 (measured
//    ≤ 1.9e-6); the A gradients are exactly zero on both sides (B = 0).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "train/adapter_io.h"
#include "train/batch_builder.h"
#include "train/objective.h"
#include "train/trainer.h"
#include "train/train_test_data.h"

namespace brioche::train {
namespace {

struct TrlGoldens {
  nlohmann::json meta = nlohmann::json::parse(std::ifstream(golden("trl/trl_goldens.json")));
  std::shared_ptr<formats::SafetensorsFile> grads = formats::SafetensorsFile::open(golden("trl/trl_grads.safetensors"));
  model::Checkpoint ck = model::load_safetensors_checkpoint(golden("tiny_llama"));

  Dataset pairs() const {
    Dataset ds;
    for (const auto& p : meta.at("pairs"))
      ds.pairs.push_back(
          {p[0].get<std::vector<int32_t>>(), p[1].get<std::vector<int32_t>>(), p[2].get<std::vector<int32_t>>()});
    return ds;
  }

  // TRL's config for `method` in brioche's terms (ORPO's β is our λ).
  TrainConfig config(const std::string& method, const std::string& output) const {
    const nlohmann::json& m = meta.at("methods").at(method).at("config");
    TrainConfig c;
    c.data = "(in memory)";
    c.output = output;
    c.quiet = true;
    c.method = method == "orpo"             ? Method::ORPO
               : method == "simpo"          ? Method::SimPO
               : m.at("loss_type") == "ipo" ? Method::IPO
                                            : Method::DPO;
    if (c.method == Method::ORPO)
      c.orpo_lambda = m.at("beta");
    else
      c.beta = m.at("beta");
    if (c.method == Method::SimPO) c.simpo_gamma = m.at("simpo_gamma");
    if (m.contains("rpo_alpha")) c.rpo_alpha = m.at("rpo_alpha").get<float>();
    c.resume_adapter = golden("trl/adapter_init");
    c.iters = 1;
    c.batch_size = int(meta.at("pairs").size());
    c.learning_rate = 1e-6f;
    c.max_grad_norm = 0.0f;
    c.lr_schedule = LrSchedule::Constant;
    c.warmup = 0;
    c.head_chunk_size = 13;  // uneven vocab chunks: the fused head as training runs it
    return c;                // sft_scope unset: ORPO's default (full) is TRL's NLL
  }
};

double rel_l2(const float* got, const float* want, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) num += std::pow(double(got[i]) - want[i], 2), den += double(want[i]) * want[i];
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

class TrlParity : public ::testing::TestWithParam<std::string> {};

TEST_P(TrlParity, FirstStepMetricsEqualTrls) {
  TrlGoldens g;
  const std::string method = GetParam();
  const std::string out = std::string(BRIOCHE_BINARY_DIR) + "/trl_parity_" + method;
  std::filesystem::remove_all(out);
  Trainer trainer(g.config(method, out), g.ck, {g.pairs(), std::nullopt});
  trainer.run();
  nlohmann::json step;
  std::ifstream log(out + "/log.jsonl");
  for (std::string line; std::getline(log, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "step" && j["step"] == 1) step = j;
  }
  ASSERT_FALSE(step.is_null()) << out << "/log.jsonl has no step 1";
  const nlohmann::json& want = g.meta["methods"][method];
  auto near = [](double got, double expected) { return std::abs(got - expected) <= 1e-5 * std::abs(expected) + 1e-6; };
  EXPECT_PRED2(near, step.at("loss").get<double>(), want.at("loss").get<double>()) << method << " loss";
  int compared = 0;
  for (const auto& [name, value] : want.at("metrics").items()) {
    // CPOTrainer logs its NLL term weighted by cpo_alpha (0 for SimPO); brioche's SimPO has no such term.
    if (method == "simpo" && name == "nll_loss") continue;
    ASSERT_TRUE(step.contains(name)) << method << ": brioche's step line lacks TRL's " << name;
    EXPECT_PRED2(near, step[name].get<double>(), value.get<double>()) << method << " " << name;
    std::printf("[ %-7s ] %-20s brioche %12.7f  TRL %12.7f\n", method.c_str(), name.c_str(), step[name].get<double>(),
                value.get<double>());
    ++compared;
  }
  EXPECT_GE(compared, 6) << method;
  std::filesystem::remove_all(out);
}

TEST_P(TrlParity, FirstStepLoraGradientsEqualTrls) {
  TrlGoldens g;
  const std::string method = GetParam();
  const TrainConfig c = g.config(method, "");
  std::unique_ptr<LoraAdapter> adapter = load_adapter(golden("trl/adapter_init"), g.ck);
  adapter->zero_grads();
  TrainModel model(g.ck, adapter.get(), {});
  FusedLogpHead head(g.ck.weights.output, c.head_chunk_size);
  const Dataset ds = g.pairs();
  std::vector<const TokenizedPair*> ptrs;
  for (const auto& p : ds.pairs) ptrs.push_back(&p);
  const TokenBatch batch = build_preference_batch(ptrs, {.method = c.method, .sft_scope = c.resolved_sft_scope()});
  std::vector<SequenceLogps> ref;
  if (needs_reference(c.method)) ref = batch_logps(model, head, batch, /*adapter_enabled=*/false);
  const LossConfig lc{.method = c.method,
                      .orpo_lambda = c.orpo_lambda,
                      .beta = c.beta,
                      .simpo_gamma = c.simpo_gamma,
                      .rpo_alpha = c.rpo_alpha};
  run_objective(model, head, batch, lc, ref, {});
  double worst = 0;
  std::string worst_name;
  int tensors = 0;
  for (auto& e : adapter->entries()) {
    const std::string key = method + ".layers." + std::to_string(e.layer) + "." + std::string(module_name(e.module));
    for (auto [ab, grad] : {std::pair{".lora_A", &e.factors->grad_a}, std::pair{".lora_B", &e.factors->grad_b}}) {
      Tensor w = g.grads->tensor(key + ab);
      ASSERT_EQ(w.numel(), grad->numel()) << key + ab;
      const double err = rel_l2(grad->data_as<float>(), w.data_as<float>(), grad->numel());
      if (err > worst) worst = err, worst_name = key + ab;
      ++tensors;
    }
  }
  EXPECT_EQ(tensors, 2 * 7 * g.ck.config.n_layers);
  EXPECT_LT(worst, 1e-4) << method << ": worst gradient " << worst_name;
  std::printf("[ %-7s ] %d LoRA gradient tensors, worst relative L2 %.2e (%s)\n", method.c_str(), tensors, worst,
              worst_name.c_str());
}

INSTANTIATE_TEST_SUITE_P(Methods, TrlParity, ::testing::Values("dpo", "ipo", "dpo_rpo", "ipo_rpo", "orpo", "simpo"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace brioche::train
