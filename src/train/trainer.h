// The LoRA training loop: batches → objective → clip → AdamW, with periodic
// validation, checkpoints, metrics.json and progress on stderr.
//
//   Trainer trainer(config, checkpoint, {.train = train_set, .valid = &valid_set});
//   TrainResult result = trainer.run();   // writes config.output/{adapter_*, metrics.json}
//
// Caches that keep CPU training cheap without changing the math: the output
// of the frozen layers below the first adapted layer (it depends only on the
// tokens) and, for DPO/IPO, the reference log-probs (adapter disabled),
// both computed once per example.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/weights.h"
#include "ops/collective.h"
#include "train/dataset.h"
#include "train/eval_samples.h"
#include "train/lm_head.h"
#include "train/optimizer.h"
#include "train/train_state.h"
#include "train/train_config.h"
#include "train/train_base.h"
#include "train/train_model.h"

namespace brioche::train {

struct EvalMetrics {
  double loss = 0.0;
  double nll = 0.0;                               // SFT: the loss; ORPO: its NLL term
  double or_loss = 0.0;                           // preference: mean per-pair objective (ORPO: −log σ(log-odds))
  double accuracy = 0.0;                          // preference: share of pairs with the chosen ahead
  double margin = 0.0;                            // preference: mean (ℓ_w − ℓ_r), length-normalised log-probs
  double chosen_logp = 0.0, rejected_logp = 0.0;  // mean per-token log-probs
  // TRL's names (LossValue says how each method defines them).
  double reward_chosen = 0.0, reward_rejected = 0.0;
  double log_odds_ratio = 0.0, log_odds_chosen = 0.0;       // ORPO
  double trl_logps_chosen = 0.0, trl_logps_rejected = 0.0;  // TRL's logps/*: sums (DPO/IPO) or means
  int64_t examples = 0;
  // Our names, and for preference methods also TRL's: rewards/chosen,
  // rewards/rejected, rewards/margins, rewards/accuracies, logps/chosen,
  // logps/rejected; nll_loss where the loss has an NLL term (ORPO, DPO/IPO
  // with rpo_alpha); for ORPO log_odds_ratio, log_odds_chosen.
  nlohmann::json to_json(const LossConfig& objective) const;
};

struct TrainResult {
  int steps = 0;
  bool interrupted = false;  // stopped by request_stop(): a resumable checkpoint was written (checkpoint_dir)
  std::string checkpoint_dir;
  double seconds = 0.0;
  std::optional<EvalMetrics> first_eval, last_eval;  // validation before training and at the end
  std::optional<EvalMetrics> test_eval;              // the test set, once, with the final adapter
  double best_margin = 0.0;
  int best_margin_step = -1;
  nlohmann::json metrics;  // what metrics.json holds
};

struct TrainData {
  Dataset train;
  std::optional<Dataset> valid;
  std::optional<Dataset> test;  // evaluated once after training (TrainConfig::test_file / test_split)
};

class Trainer {
 public:
  Trainer(TrainConfig config, const model::Checkpoint& checkpoint, TrainData data);
  // Any architecture (train_base.h); the base's checkpoint must outlive the trainer.
  Trainer(TrainConfig config, TrainBase base, TrainData data);
  ~Trainer();

  // Data parallel (train/data_parallel.h): this trainer is one rank of
  // `collective` (not owned). Rank 0 alone evaluates, logs and writes files.
  void set_data_parallel(ops::Collective* collective) { dp_ = collective; }
  // Polled after every step (a signal handler sets it): when true, the run
  // stops there, writes the adapter, metrics.json and a resumable checkpoint,
  // and returns with `interrupted`. With data parallelism the ranks agree
  // on the step (the flag travels with the step's loss sum).
  void set_stop_flag(const std::atomic<bool>* flag) { stop_ = flag; }
  // Decodes eval_samples' completions (train/eval_samples.h); without it no samples are made.
  void set_sample_decoder(SampleDecoder decoder) { sample_decoder_ = std::move(decoder); }
  TrainResult run();
  EvalMetrics evaluate();  // on the validation set (or the training set when there is none), whole
  LoraAdapter& adapter() { return *adapter_; }
  const TrainConfig& config() const { return config_; }

 private:
  struct Split;
  struct MicroBatch;
  MicroBatch make_batch(Split& split, const std::vector<int>& indices, bool with_prefix);
  // The metrics of the first max_batches batches of `split` (0: all of it).
  EvalMetrics evaluate(Split& split, int max_batches);
  // The test set's metrics with the adapter the run leaves in OUTPUT (the
  // best evaluation's under keep_best, read back from OUTPUT/best).
  EvalMetrics evaluate_test(bool best_is_final);
  // The examples `indices` of `split` laid out as one batch (no prefix, no reference).
  TokenBatch layout(const Split& split, const std::vector<int>& indices) const;
  // The most rows a micro-batch of `split` can have: its batch_size longest examples together.
  int64_t longest_batch_rows(const Split& split) const;
  void log(const std::string& line) const;
  // eval_samples greedy completions of the evaluation split's first prompts: log.jsonl and stderr.
  void write_samples(int step);
  // The terminal's live line: a bar, step, loss, lr, tokens/s, elapsed and ETA.
  void show_progress(int done, int total, int first_step, double loss, float lr, double tokens_per_s,
                     double elapsed) const;
  void save(const std::string& dir);  // the adapter in PEFT layout (a host copy when it lives on the GPU)
  // output/checkpoints/step_N: the adapter and its train state; keeps the newest save_total_limit.
  std::string save_checkpoint(int step, const TrainState& state, const AdamW& optimizer);
  // One line of output/log.jsonl (appended and flushed: it is read while the run goes on).
  void log_event(const nlohmann::json& event) const;

  TrainConfig config_;
  TrainBase base_;
  LossConfig loss_config_;
  std::unique_ptr<LoraAdapter> adapter_;
  std::unique_ptr<TrainStack> model_;
  std::unique_ptr<LogpHead> head_;
  std::unique_ptr<Dataset> owned_train_, owned_valid_, owned_test_;
  std::unique_ptr<Split> train_, valid_, test_;
  ops::Collective* dp_ = nullptr;
  const std::atomic<bool>* stop_ = nullptr;
  SampleDecoder sample_decoder_;
  mutable bool progress_shown_ = false;  // the live progress line is on the terminal
};

// Peak resident memory of this process (VmHWM), bytes; 0 when unknown.
size_t peak_rss_bytes();
// Peak bytes handed out by the CUDA allocator (weights, activations, caches); 0 without CUDA.
size_t peak_device_bytes();

}  // namespace brioche::train
