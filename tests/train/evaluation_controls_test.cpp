// The evaluation controls of `brioche train` on the tiny golden model:
// keep-best and early stopping on a chosen metric (transformers'
// metric_for_best_model / greater_is_better / early_stopping_threshold), a
// seeded test split, the test set evaluated once with the final adapter, and
// a cap on the batches of each periodic evaluation.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/trainer.h"
#include "train/train_test_data.h"

namespace brioche::train {
namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(std::ifstream(path)); }

TEST(EvaluationControls, EveryMetricForBestNameIsWhatAnEvaluationLogs) {
  for (Method m : {Method::SFT, Method::DPO, Method::ORPO, Method::SimPO, Method::IPO}) {
    const nlohmann::json logged = EvalMetrics{}.to_json({.method = m});
    for (const std::string& name : eval_metric_names(m))
      EXPECT_TRUE(logged.contains(name)) << method_name(m) << ": " << name;
  }
  for (Method m : {Method::DPO, Method::IPO}) {  // with rpo_alpha: nll_loss too
    const nlohmann::json logged = EvalMetrics{}.to_json({.method = m, .rpo_alpha = 1.0f});
    ASSERT_TRUE(logged.contains("nll_loss")) << method_name(m);
    for (const std::string& name : eval_metric_names(m, /*nll_term=*/true))
      EXPECT_TRUE(logged.contains(name)) << method_name(m) << " with rpo_alpha: " << name;
  }
}

TEST(EvaluationControls, TheConfigChecksTheMetricAndInfersItsDirection) {
  auto config = [](Method method, const std::string& metric) {
    TrainConfig c;
    c.data = "(in memory)";
    c.method = method;
    c.metric_for_best = metric;
    return c;
  };
  // transformers' rule: lower is better for names ending in "loss", higher for the rest.
  for (const auto& [metric, higher] : std::vector<std::pair<std::string, bool>>{{"eval_loss", false},
                                                                                {"loss", false},
                                                                                {"eval_nll_loss", false},
                                                                                {"rewards/margins", true},
                                                                                {"eval_rewards/accuracies", true},
                                                                                {"margin", true}}) {
    TrainConfig c = config(Method::ORPO, metric);
    EXPECT_NO_THROW(c.finalize()) << metric;
    EXPECT_EQ(c.resolved_greater_is_better(), higher) << metric;
  }
  TrainConfig flipped = config(Method::DPO, "rewards/margins");
  flipped.greater_is_better = false;
  EXPECT_FALSE(flipped.resolved_greater_is_better());
  EXPECT_EQ(config(Method::DPO, "eval_rewards/margins").best_metric_key(), "rewards/margins");

  // A name the method's evaluations do not log is refused, naming those they do.
  TrainConfig sft = config(Method::SFT, "rewards/margins");
  try {
    sft.finalize();
    ADD_FAILURE() << "sft accepted rewards/margins";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected one of loss, nll"), std::string::npos) << e.what();
  }
  TrainConfig orpo_only = config(Method::DPO, "log_odds_ratio");  // ORPO's, not DPO's
  EXPECT_THROW(orpo_only.finalize(), Error);
  TrainConfig both = config(Method::SFT, "eval_loss");
  both.test_file = "test.jsonl";
  both.test_split = 0.1f;
  EXPECT_THROW(both.finalize(), Error);
}

// The step of the best value among the evaluations after step 0 (the first on ties).
int best_step(const nlohmann::json& evals, const std::string& key, bool higher) {
  int step = -1;
  double best = 0;
  for (const auto& e : evals) {
    if (e["step"].get<int>() == 0) continue;
    const double v = e[key].get<double>();
    if (step < 0 || (higher ? v > best : v < best)) best = v, step = e["step"].get<int>();
  }
  return step;
}

// The same run kept twice, once for the highest rewards/margins and once for
// the lowest: each final adapter is byte for byte its best evaluation's checkpoint.
TEST(EvaluationControls, KeepBestFollowsTheChosenMetricInEitherDirection) {
  model::Checkpoint ck = model::load_safetensors_checkpoint(golden("tiny_llama"));
  const std::string root = std::string(BRIOCHE_BINARY_DIR) + "/train_keep_best_metric_test";
  std::filesystem::remove_all(root);
  std::vector<int> chosen;
  for (bool higher : {true, false}) {
    TrainConfig c = tiny_orpo_config(root + (higher ? "/higher" : "/lower"));
    c.iters = 12;
    c.steps_per_eval = 2;
    c.save_checkpoints = true;
    c.keep_best = true;
    c.metric_for_best = "rewards/margins";
    c.greater_is_better = higher;
    TrainResult r = Trainer(c, ck, {synthetic_pairs(16, 1), synthetic_pairs(8, 2)}).run();
    EXPECT_EQ(r.steps, 12);
    const nlohmann::json metrics = read_json(c.output + "/metrics.json");
    const int step = best_step(metrics["evals"], "rewards/margins", higher);
    std::printf("[ keep best ] %s rewards/margins: step %d\n", higher ? "highest" : "lowest", step);
    EXPECT_EQ(metrics["metric_for_best"], "rewards/margins");
    EXPECT_EQ(metrics["greater_is_better"], higher);
    EXPECT_EQ(metrics["best_metric_step"], step);
    EXPECT_EQ(metrics["adapter_step"], step);
    EXPECT_EQ(file_bytes(c.output + "/adapter_model.safetensors"),
              file_bytes(c.output + "/checkpoints/step_" + std::to_string(step) + "/adapter_model.safetensors"));
    chosen.push_back(step);
  }
  EXPECT_NE(chosen[0], chosen[1]);  // the margins moved: the two directions pick different evaluations
  std::filesystem::remove_all(root);
}

// early_stopping_threshold: an evaluation better by no more than it does not
// restart the patience. With a threshold no change reaches, the patience runs
// out two evaluations after the first (step 2): the run stops at step 6.
TEST(EvaluationControls, EarlyStoppingOnAMetricWithAThreshold) {
  model::Checkpoint ck = model::load_safetensors_checkpoint(golden("tiny_llama"));
  const std::string out = std::string(BRIOCHE_BINARY_DIR) + "/train_early_stop_metric_test";
  std::filesystem::remove_all(out);
  TrainConfig c = tiny_orpo_config(out);
  c.iters = 30;
  c.steps_per_eval = 2;
  c.early_stopping_patience = 2;
  c.metric_for_best = "eval_rewards/margins";
  c.early_stopping_threshold = 1e6f;
  TrainResult r = Trainer(c, ck, {synthetic_pairs(16, 1), synthetic_pairs(8, 2)}).run();
  EXPECT_EQ(r.steps, 6);
  const nlohmann::json metrics = read_json(out + "/metrics.json");
  EXPECT_EQ(metrics["early_stopped"], true);
  // The best still follows every strict improvement (the threshold is the patience's only).
  EXPECT_EQ(metrics["best_metric_step"], best_step(metrics["evals"], "rewards/margins", true));

  // Without the threshold the margins keep rising on this data: the run goes on past step 6.
  std::filesystem::remove_all(out);
  c.early_stopping_threshold = 0;
  c.iters = 10;
  TrainResult all = Trainer(c, ck, {synthetic_pairs(16, 1), synthetic_pairs(8, 2)}).run();
  EXPECT_GT(all.steps, 6);
  std::filesystem::remove_all(out);
}

Dataset numbered_examples(int n) {
  Dataset d;
  for (int i = 0; i < n; ++i) d.examples.push_back({.prompt = {1, 3 + i}, .response = {40, 2}});
  return d;
}

std::vector<int> ids(const Dataset& d) {
  std::vector<int> out;
  for (const auto& e : d.examples) out.push_back(e.prompt[1] - 3);
  return out;
}

TEST(EvaluationControls, TheTestSplitIsSeededAndKeepsTheFileOrder) {
  Dataset train = numbered_examples(20);
  const Dataset test = split_off(train, 0.25, 7);
  ASSERT_EQ(test.size(), 5u);
  ASSERT_EQ(train.size(), 15u);
  const std::vector<int> held = ids(test), kept = ids(train);
  EXPECT_TRUE(std::is_sorted(held.begin(), held.end()));
  EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
  std::vector<int> all = held;
  all.insert(all.end(), kept.begin(), kept.end());
  std::sort(all.begin(), all.end());
  std::vector<int> expected(20);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);
  // The draw is std::mt19937_64 and our own Fisher–Yates: these rows on every machine.
  EXPECT_EQ(held, (std::vector<int>{2, 4, 12, 14, 18}));

  Dataset again = numbered_examples(20), other = numbered_examples(20);
  EXPECT_EQ(ids(split_off(again, 0.25, 7)), held);
  EXPECT_NE(ids(split_off(other, 0.25, 8)), held);

  Dataset small = numbered_examples(20);
  EXPECT_EQ(split_off(small, 0.01, 1).size(), 1u);  // at least one row
  Dataset one = numbered_examples(1);
  EXPECT_THROW(split_off(one, 0.5, 1), Error);  // none would be left to train on
  Dataset any = numbered_examples(4);
  EXPECT_THROW(split_off(any, 0.0, 1), Error);
}

// The test set is read once, after training, with the adapter OUTPUT holds:
// under keep-best the best evaluation's (read back from OUTPUT/best), else
// the last step's. With the validation set as the test set the numbers must
// be those evaluations' own. eval_batches caps the periodic evaluations only,
// to their split's first batches.
TEST(EvaluationControls, TheTestSetIsEvaluatedOnceWithTheFinalAdapter) {
  model::Checkpoint ck = model::load_safetensors_checkpoint(golden("tiny_llama"));
  const std::string root = std::string(BRIOCHE_BINARY_DIR) + "/train_test_set_test";
  std::filesystem::remove_all(root);
  // Validation pairs swapped: the loss rises after the first evaluation, so the best (step 2) is not the last.
  const Dataset train = synthetic_pairs(16, 1);
  Dataset swapped = train;
  for (auto& p : swapped.pairs) std::swap(p.chosen, p.rejected);

  TrainConfig c = tiny_orpo_config(root + "/best");
  c.iters = 6;
  c.steps_per_eval = 2;
  c.keep_best = true;
  TrainResult r = Trainer(c, ck, {train, swapped, swapped}).run();
  ASSERT_TRUE(r.test_eval.has_value());
  nlohmann::json metrics = read_json(c.output + "/metrics.json");
  ASSERT_EQ(metrics["best_metric_step"], 2);
  EXPECT_EQ(metrics["test"]["step"], 2);
  EXPECT_EQ(metrics["test"]["examples"], 16);
  EXPECT_NEAR(metrics["test"]["loss"].get<double>(), metrics["evals"][1]["loss"].get<double>(), 1e-6);
  EXPECT_NEAR(metrics["test"]["rewards/margins"].get<double>(), metrics["evals"][1]["rewards/margins"].get<double>(),
              1e-6);
  int test_events = 0;
  std::ifstream log(c.output + "/log.jsonl");
  for (std::string line; std::getline(log, line);) test_events += nlohmann::json::parse(line)["event"] == "test";
  EXPECT_EQ(test_events, 1);

  // No keep-best, evaluations capped at 1 batch of 2: the test set is still read whole, with the last adapter.
  c.output = root + "/capped";
  c.keep_best = false;
  c.eval_batches = 1;
  Trainer(c, ck, {train, swapped, swapped}).run();
  metrics = read_json(c.output + "/metrics.json");
  EXPECT_EQ(metrics["config"]["eval_batches"], 1);
  EXPECT_EQ(metrics["test"]["step"], 6);
  EXPECT_EQ(metrics["test"]["examples"], 16);
  for (const auto& e : metrics["evals"]) EXPECT_EQ(e["examples"], 2);
  // The capped evaluations are those of a validation set of just its first two pairs.
  Dataset first_two = swapped;
  first_two.pairs.resize(2);
  c.output = root + "/two";
  c.eval_batches = 0;
  Trainer(c, ck, {train, first_two}).run();
  const nlohmann::json two = read_json(c.output + "/metrics.json");
  ASSERT_EQ(two["evals"].size(), metrics["evals"].size());
  for (size_t i = 0; i < two["evals"].size(); ++i)
    EXPECT_EQ(two["evals"][i]["loss"], metrics["evals"][i]["loss"]) << "evaluation " << i;
  EXPECT_FALSE(two.contains("test"));
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace brioche::train
