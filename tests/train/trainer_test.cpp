// The training loop end to end on the tiny golden model (no tokenizer needed:
// datasets are given as tokens): ORPO with every memory lever on (prefix-shared,
// segmented backward, fused head with uneven chunks, grad accumulation, dropout)
// learns a synthetic preference, writes checkpoints and metrics.json, and a
// warm start from its adapter resumes from the same validation metrics.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/train_state.h"
#include "train/trainer.h"
#include "train/train_test_data.h"

namespace brioche::train {
namespace {

TEST(Trainer, OrpoWithAllLeversLearnsAndResumes) {
  model::Checkpoint ck = model::load_safetensors_checkpoint(golden("tiny_llama"));
  const std::string out = std::string(BRIOCHE_BINARY_DIR) + "/train_trainer_test";
  std::filesystem::remove_all(out);
  TrainConfig c = tiny_orpo_config(out);
  c.iters = 30;
  c.grad_accumulation_steps = 2;
  c.lora_dropout = 0.1f;
  c.segment_size = 1;
  c.prefix_shared = true;
  c.steps_per_eval = 10;
  c.save_checkpoints = true;
  Trainer trainer(c, ck, {synthetic_pairs(16, 1), synthetic_pairs(16, 2)});
  TrainResult r = trainer.run();
  ASSERT_TRUE(r.first_eval && r.last_eval);
  std::printf("[ tiny orpo ] accuracy %.3f -> %.3f, margin %.3f -> %.3f, loss %.3f -> %.3f\n", r.first_eval->accuracy,
              r.last_eval->accuracy, r.first_eval->margin, r.last_eval->margin, r.first_eval->loss, r.last_eval->loss);
  EXPECT_GE(r.last_eval->accuracy, 0.9);
  EXPECT_LT(r.last_eval->loss, r.first_eval->loss);
  for (int step : {10, 20, 30}) {
    EXPECT_TRUE(
        std::filesystem::exists(out + "/checkpoints/step_" + std::to_string(step) + "/adapter_model.safetensors"));
  }
  auto metrics = nlohmann::json::parse(std::ifstream(out + "/metrics.json"));
  ASSERT_EQ(metrics["evals"].size(), 4u);  // steps 0, 10, 20, 30
  for (const char* key : {"step", "loss", "nll", "or", "accuracy", "margin", "chosen_logp", "rejected_logp",
                          "learning_rate", "tokens_per_s", "peak_memory_bytes"})
    EXPECT_TRUE(metrics["evals"][1].contains(key)) << key;
  EXPECT_EQ(metrics["best_margin_step"], r.best_margin_step);
  EXPECT_EQ(metrics["config"]["method"], "orpo");
  EXPECT_EQ(metrics["eval_split"], "valid");
  EXPECT_DOUBLE_EQ(metrics["best_margin"].get<double>(), r.best_margin);

  // Warm start: the loaded adapter reproduces the final validation metrics at step 0.
  TrainConfig resume = c;
  resume.resume_adapter = out;
  resume.output = out + "/resumed";
  resume.iters = 1;
  resume.save_checkpoints = false;
  resume.rank = 8;  // the adapter's own rank wins, and metrics.json says so
  Trainer again(resume, ck, {synthetic_pairs(16, 1), synthetic_pairs(16, 2)});
  EvalMetrics m = again.evaluate();
  EXPECT_NEAR(m.loss, r.last_eval->loss, 1e-5);
  EXPECT_NEAR(m.margin, r.last_eval->margin, 1e-5);
  EXPECT_EQ(*again.config().rank, 4);
  EXPECT_FLOAT_EQ(*again.config().alpha, 8.0f);  // orpo's default scale 2 · rank 4
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A run stopped after its first step (the flag a SIGINT sets) writes a
// resumable checkpoint; resuming it gives, bit for bit, the adapter of the
// run that was never interrupted: optimizer moments, schedule, data order,
// dropout and the evaluations so far all continue where they were.
TEST(Trainer, AnInterruptedRunResumesToTheSameAdapterBitForBit) {
  model::Checkpoint ck = model::load_safetensors_checkpoint(golden("tiny_llama"));
  const std::string root = std::string(BRIOCHE_BINARY_DIR) + "/train_resume_test";
  std::filesystem::remove_all(root);
  TrainConfig c = tiny_orpo_config(root + "/full");
  c.iters = 12;
  c.grad_accumulation_steps = 2;
  c.lora_dropout = 0.1f;
  c.steps_per_eval = 4;
  auto data = [] { return TrainData{synthetic_pairs(10, 1), synthetic_pairs(8, 2)}; };
  TrainResult full = Trainer(c, ck, data()).run();
  ASSERT_FALSE(full.interrupted);

  TrainConfig first = c;
  first.output = root + "/stopped";
  first.save_steps = 100;  // no periodic checkpoint: the one written is the stop's
  Trainer stopped(first, ck, data());
  const std::atomic<bool> stop{true};
  stopped.set_stop_flag(&stop);
  TrainResult part = stopped.run();
  ASSERT_TRUE(part.interrupted);
  EXPECT_EQ(part.steps, 1);
  EXPECT_EQ(part.checkpoint_dir, first.output + "/checkpoints/step_1");
  ASSERT_TRUE(has_train_state(part.checkpoint_dir));
  EXPECT_TRUE(std::filesystem::exists(first.output + "/metrics.json"));
  EXPECT_TRUE(std::filesystem::exists(first.output + "/adapter_model.safetensors"));

  TrainConfig rest = c;
  rest.output = root + "/resumed";
  rest.resume = part.checkpoint_dir;
  rest.save_steps = 5;
  rest.save_total_limit = 1;
  TrainResult resumed = Trainer(rest, ck, data()).run();
  EXPECT_EQ(resumed.steps, 12);
  EXPECT_EQ(file_bytes(rest.output + "/adapter_model.safetensors"),
            file_bytes(c.output + "/adapter_model.safetensors"));
  auto full_metrics = nlohmann::json::parse(std::ifstream(c.output + "/metrics.json"));
  auto resumed_metrics = nlohmann::json::parse(std::ifstream(rest.output + "/metrics.json"));
  ASSERT_EQ(resumed_metrics["evals"].size(), full_metrics["evals"].size());  // steps 0 (before the stop), 4, 8, 12
  EXPECT_EQ(resumed_metrics["evals"].back()["loss"], full_metrics["evals"].back()["loss"]);
  EXPECT_EQ(resumed_metrics["best_margin_step"], full_metrics["best_margin_step"]);
  // --save-total-limit 1: of step_5 and step_10 only the newest stays.
  EXPECT_FALSE(std::filesystem::exists(rest.output + "/checkpoints/step_5"));
  EXPECT_TRUE(has_train_state(rest.output + "/checkpoints/step_10"));
  // log.jsonl: one line per step of this process and one per evaluation, as they happen.
  std::ifstream log(rest.output + "/log.jsonl");
  int steps = 0, evals = 0;
  for (std::string line; std::getline(log, line);) {
    auto e = nlohmann::json::parse(line);
    (e["event"] == "step" ? steps : evals) += 1;
    // Throughput over the steps' own time: positive, and each step's time recorded.
    EXPECT_GT(e["tokens_per_s"].get<double>(), 0.0) << line;
    if (e["event"] == "step") {
      EXPECT_GT(e["step_seconds"].get<double>(), 0.0) << line;
    }
    // TRL's ORPO names, per step and per evaluation.
    for (const char* key : {"rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies",
                            "logps/chosen", "log_odds_ratio", "log_odds_chosen", "nll_loss"})
      EXPECT_TRUE(e.contains(key)) << key << " in " << line;
  }
  EXPECT_EQ(steps, 11);
  EXPECT_EQ(evals, 3);

  // A checkpoint of another data set is refused, naming the file.
  TrainConfig wrong = rest;
  wrong.output = root + "/wrong";
  EXPECT_THROW(Trainer(wrong, ck, {synthetic_pairs(7, 1), std::nullopt}).run(), brioche::Error);
}

// Validation pairs are the training pairs with chosen and rejected swapped:
// training raises the validation loss, so the first evaluation after step 0
// is the best, two more without a lower loss stop the run (patience 2), and
// keep-best makes that first evaluation's adapter the final one.
TEST(Trainer, EarlyStoppingAndKeepBestFollowTheEvaluationLoss) {
  model::Checkpoint ck = model::load_safetensors_checkpoint(golden("tiny_llama"));
  const std::string out = std::string(BRIOCHE_BINARY_DIR) + "/train_early_stopping_test";
  std::filesystem::remove_all(out);
  TrainConfig c = tiny_orpo_config(out);
  c.iters = 30;
  c.steps_per_eval = 2;
  c.save_checkpoints = true;
  c.early_stopping_patience = 2;
  c.keep_best = true;
  Dataset train = synthetic_pairs(16, 1), swapped = train;
  for (auto& p : swapped.pairs) std::swap(p.chosen, p.rejected);
  Trainer trainer(c, ck, {train, swapped});
  TrainResult r = trainer.run();
  auto metrics = nlohmann::json::parse(std::ifstream(out + "/metrics.json"));
  std::printf("[ early stop ] evals:");
  for (const auto& e : metrics["evals"])
    std::printf(" step %d loss %.4f;", e["step"].get<int>(), e["loss"].get<double>());
  std::printf("\n");
  EXPECT_EQ(r.steps, 6);  // evaluations at 2 (best), 4, 6
  EXPECT_EQ(metrics["steps"], 6);
  EXPECT_EQ(metrics["early_stopped"], true);
  EXPECT_EQ(metrics["metric_for_best"], "eval_loss");
  EXPECT_EQ(metrics["greater_is_better"], false);
  EXPECT_EQ(metrics["best_metric_step"], 2);
  EXPECT_EQ(metrics["adapter_step"], 2);
  ASSERT_EQ(metrics["evals"].size(), 4u);  // 0, 2, 4, 6
  EXPECT_DOUBLE_EQ(metrics["best_metric"].get<double>(), metrics["evals"][1]["loss"].get<double>());
  auto bytes = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string final_adapter = bytes(out + "/adapter_model.safetensors");
  EXPECT_EQ(final_adapter, bytes(out + "/checkpoints/step_2/adapter_model.safetensors"));
  EXPECT_NE(final_adapter, bytes(out + "/checkpoints/step_6/adapter_model.safetensors"));

  // Without keep-best the last step's adapter is the final one; without patience the run goes on.
  std::filesystem::remove_all(out);
  c.keep_best = false;
  c.early_stopping_patience = 0;
  c.iters = 8;
  TrainResult all = Trainer(c, ck, {train, swapped}).run();
  EXPECT_EQ(all.steps, 8);
  auto plain = nlohmann::json::parse(std::ifstream(out + "/metrics.json"));
  EXPECT_EQ(plain["early_stopped"], false);
  EXPECT_EQ(plain["adapter_step"], 8);
  EXPECT_EQ(bytes(out + "/adapter_model.safetensors"), bytes(out + "/checkpoints/step_8/adapter_model.safetensors"));
  std::filesystem::remove_all(out);
}

TEST(Trainer, RejectsDataOfTheWrongKind) {
  model::Checkpoint ck = model::load_safetensors_checkpoint(golden("tiny_llama"));
  TrainConfig c;
  c.data = "(in memory)";
  c.method = Method::SFT;
  c.quiet = true;
  auto make = [&] { Trainer t(c, ck, {synthetic_pairs(2, 1), std::nullopt}); };
  EXPECT_THROW(make(), brioche::Error);
}

}  // namespace
}  // namespace brioche::train
