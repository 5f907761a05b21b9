// Everything `brioche train` can be told, with the reference trainer's names
// (JSON/TOML config keys == CLI flag names with '-' for '_'; see config_file.h).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "train/lora.h"
#include "train/losses.h"
#include "train/optimizer.h"

namespace brioche::train {

struct TrainConfig {
  std::string model;  // .gguf file or safetensors directory
  // The base's Hugging Face id written as the adapter's base_model_name_or_path;
  // empty: the model's own metadata (huggingface_repo_id), else its path.
  std::string base_model_id;
  std::string data;                 // directory with train.jsonl (and valid.jsonl)
  std::string output = "adapters";  // adapter directory (adapter_path)
  std::string resume_adapter;       // warm start: factor weights only; optimizer and schedule restart
  std::string resume;  // a checkpoint with trainer_state.json: the run continues exactly (train/train_state.h)

  Method method = Method::SFT;
  // Which tokens the NLL scores. Unset: what TRL does per method. SFT:
  // `response`, the reply only (prompt tokens are context, not targets), as
  // TRL's SFTTrainer on prompt/completion data (for messages, the last
  // assistant turn; plain `text` rows have no prompt and are scored whole).
  // ORPO: `full`, prompt and reply of the chosen sequence, as TRL's
  // ORPOTrainer computes its NLL term (its odds ratio reads the replies only).
  std::optional<SftScope> sft_scope;
  SftScope resolved_sft_scope() const {
    return sft_scope.value_or(method == Method::ORPO ? SftScope::Full : SftScope::Response);
  }
  float orpo_lambda = 0.1f;
  float beta = 0.1f;  // dpo/ipo/simpo
  float simpo_gamma = 0.5f;
  // DPO/IPO: weight α of the chosen replies' NLL added to the loss (TRL's
  // rpo_alpha, RPO); unset: no NLL term, as TRL's default None.
  std::optional<float> rpo_alpha;

  std::optional<float> learning_rate;  // default 2e-4 (sft) / 1e-5 (preference)
  LrSchedule lr_schedule = LrSchedule::Cosine;
  int warmup = -1;  // -1: min(10, steps/10) for orpo, else 0
  int iters = 0;    // optimizer steps; 0: from epochs
  int epochs = 1;
  int batch_size = 1;
  int grad_accumulation_steps = 1;
  int max_seq_length = 2048;
  float max_grad_norm = 1.0f;  // 0: no clipping
  float weight_decay = 0.0f;

  std::optional<int> rank;     // default 8 (sft) / 16 (orpo)
  std::optional<float> scale;  // LoRA scale s directly (mlx convention); default 1 (sft) / 2 (orpo)
  std::optional<float> alpha;  // PEFT alpha (s = alpha/r); exclusive with scale
  bool rs_lora = false;
  float lora_plus_ratio = 1.0f;
  float lora_dropout = 0.0f;
  std::vector<std::string> target_modules = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                             "gate_proj", "up_proj", "down_proj"};
  int num_layers = -1;  // LoRA on the last num_layers layers; -1 = all

  std::string device = "cpu";          // cpu | cuda | auto (cuda when this build and the driver see a GPU)
  int gpus = 1;                        // data parallel: ranks (one GPU each) sharing every step's micro-batches
  int segment_size = 0;                // segmented backward: layers per recompute segment (0 = off)
  bool offload_boundaries = false;     // segment boundaries in host memory while training on CUDA
  bool offload_attention = false;      // with them, each layer's attention output: the recompute skips the attention
  std::string boundary_dtype = "f32";  // f32 | bf16: segment boundaries in bf16 take half the memory
  int device_boundaries = 0;           // with offload_boundaries: the last N segments' boundaries stay on the device
  bool prefix_shared = false;          // one [prompt; chosen; rejected] forward per pair
  int head_chunk_size = 4096;          // fused CE head vocab chunk; 0 = plain head (full logits)
  int mlp_chunk_size = 0;              // MLP over this many tokens at a time, [tokens, inter] never held; 0 = off
  // The reference's switches, mapped onto the levers above by finalize():
  std::optional<bool> fused_head;  // orpo_fused_ce / orpo_flash_ce: true = fused head, false = full logits
  bool grad_checkpoint = false;    // = segment_size 1 (recompute every layer); exclusive with segment_size
  bool mlp_split = false;          // not supported (an error that says so)

  int steps_per_eval = 0;  // 0: only at the end
  int steps_per_report = 10;
  bool save_checkpoints = false;  // a resumable checkpoint at every evaluation
  int save_steps = 0;             // and every N steps (0: off), into output/checkpoints/step_N
  int save_total_limit = 0;       // keep only the newest K checkpoints (0: all)
  // Stop when N evaluations in a row (after step 0) did not improve
  // metric_for_best (transformers' EarlyStoppingCallback); 0: off.
  int early_stopping_patience = 0;
  // An evaluation counts as an improvement for the patience only when it is
  // better than the best so far by more than this (transformers' early_stopping_threshold).
  float early_stopping_threshold = 0.0f;
  // The adapter of the evaluation best in metric_for_best becomes the final
  // one (saved to output/best as it happens; transformers' load_best_model_at_end).
  bool keep_best = false;
  // The evaluation metric early stopping and keep-best follow (transformers'
  // metric_for_best_model): a name an evaluation logs, with or without the
  // "eval_" prefix: eval_loss (default), rewards/margins, rewards/accuracies, margin, ...
  std::string metric_for_best = "eval_loss";
  // Unset: higher is better unless the name ends in "loss" (transformers' rule).
  std::optional<bool> greater_is_better;
  // Each periodic evaluation reads only the first N batches of the evaluation
  // split (mlx-lm's val_batches); 0: all of it. The test set is read whole.
  int eval_batches = 0;
  // A held-out test set evaluated once, after training, with the final
  // adapter (the best one under keep_best): a JSONL file, or this fraction
  // of the training rows, drawn with `seed` and left out of training.
  std::string test_file;
  float test_split = 0.0f;
  // At each evaluation, greedy completions of the first N prompts of the
  // evaluation split (log.jsonl "sample" events; needs the CLI's tokenizer).
  int eval_samples = 0;
  int eval_sample_tokens = 32;  // new tokens per sample
  int seed = 0;
  int threads = 0;
  bool quiet = false;

  // Fills unset method-dependent defaults and checks ranges; errors name the field.
  void finalize();
  // metric_for_best as an evaluation's JSON key (EvalMetrics::to_json): without "eval_".
  std::string best_metric_key() const;
  bool resolved_greater_is_better() const;
  // The device `device` names, after resolving auto (Device::CPU in a build without CUDA).
  Device resolved_device() const;
  LoraConfig lora_config() const;
};

// Where options come from, for errors: "train.toml:12:1: option \"rank\": ...".
struct ConfigSource {
  std::string name;                                  // file path or "command line"
  std::map<std::string, std::string> key_locations;  // option -> "file:line:column" (TOML files)
  bool toml = false;                                 // type names in errors: "a table" vs "an object"
  std::string type_of(const nlohmann::json& value) const;
};

// Applies the keys of a flat JSON object of options (a --config file, the
// command line). Unknown keys, wrong types (strict: 3.5 is not an integer)
// and bad values are errors naming the source, the key and, for TOML, the line.
void apply_config_json(TrainConfig& config, const nlohmann::json& j, const ConfigSource& source);
void apply_config_json(TrainConfig& config, const nlohmann::json& j, const std::string& source);
nlohmann::json config_to_json(const TrainConfig& config);

// The metrics an evaluation of `method` logs (EvalMetrics::to_json's keys),
// which metric_for_best may name.
const std::vector<std::string>& eval_metric_names(Method method, bool nll_term = false);

}  // namespace brioche::train
