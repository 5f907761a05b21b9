// `brioche train`: LoRA fine-tuning (SFT, DPO, ORPO, SimPO, IPO) on a JSONL
// data directory; writes a PEFT-layout adapter, checkpoints and metrics.json.
// Options come from flags and/or --config file.json|file.toml (same names; flags win).
#include <algorithm>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/device_weights.h"
#include "model/weights.h"
#include "ops/device.h"
#include "engine/model_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "train/config_file.h"
#include "train/trainer.h"

namespace brioche::cli {

namespace {

struct TrainFlags {
  std::string config_file;
  nlohmann::json overrides = nlohmann::json::object();  // flags given on the command line
  bool quiet = false;
};

int run(const TrainFlags& flags) {
  train::TrainConfig config;
  if (!flags.config_file.empty()) {
    try {
      train::apply_config_file(config, flags.config_file);
    } catch (const Error& e) {
      throw UsageError{e.what()};
    }
  }
  try {
    train::apply_config_json(config, flags.overrides, "command line");
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
  if (flags.quiet) config.quiet = true;
  config.model = resolve_model_path(config.model);
  if (config.data.empty()) throw UsageError{"no data: pass --data DIR (with train.jsonl and optionally valid.jsonl)"};
  const std::string train_path = config.data + "/train.jsonl", valid_path = config.data + "/valid.jsonl";
  if (!std::filesystem::exists(train_path)) throw UsageError{"no training data: " + train_path + " does not exist"};
  try {
    config.finalize();
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
  ThreadPool::configure_global(config.threads > 0 ? config.threads
                                                  : int(std::max(1u, std::thread::hardware_concurrency())));

  model::Checkpoint ck = std::filesystem::is_directory(config.model) ? model::load_safetensors_checkpoint(config.model)
                                                                     : model::load_gguf_checkpoint(config.model);
  const Device device = config.resolved_device();
  if (device == Device::CUDA && !ops::cuda_available())
    throw UsageError{"--device cuda: no CUDA device is visible, or this build has no CUDA backend "
                     "(configure with --preset cuda)"};
  auto tok = engine::load_model_tokenizer(ck.gguf.get(), ck.directory);
  // Base weights go to the device once, in their stored dtype (bf16, f16, quantized blocks).
  if (device == Device::CUDA) model::move_weights(ck, device);
  train::DatasetOptions options{.preference = train::is_preference(config.method),
                                .max_seq_length = config.max_seq_length, .tokenizer = tok.get(),
                                .render = train::make_chat_renderer(ck.chat_template, *tok), .quiet = config.quiet};
  train::TrainData data{.train = train::load_dataset(train_path, options)};
  if (std::filesystem::exists(valid_path)) data.valid = train::load_dataset(valid_path, options);
  std::filesystem::create_directories(config.output);
  train::Trainer trainer(config, ck, std::move(data));
  trainer.run();
  return kExitOk;
}

// Registers `--name value` that lands in overrides["name"] only when given.
template <typename T>
void option(CLI::App* app, TrainFlags& flags, const std::string& name, const std::string& help) {
  auto key = name;
  std::replace(key.begin(), key.end(), '-', '_');
  app->add_option_function<T>("--" + name, [&flags, key](const T& v) { flags.overrides[key] = v; }, help);
}

}  // namespace

Subcommand add_train_command(CLI::App& root) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* app = root.add_subcommand("train", "LoRA fine-tuning: sft, dpo, orpo, simpo, ipo (PEFT adapter out)");
  TrainFlags& f = *flags;
  app->add_option("-c,--config", f.config_file, "JSON or TOML (.toml) file of training options, same names (flags override it)");
  app->add_option_function<std::string>("-m,--model", [&f](const std::string& v) { f.overrides["model"] = v; },
                                         "GGUF file or safetensors directory (default: SmolLM2-135M-Instruct Q4_1)");
  app->add_option_function<std::string>("-d,--data", [&f](const std::string& v) { f.overrides["data"] = v; },
                                         "directory with train.jsonl (and valid.jsonl)");
  app->add_option_function<std::string>("-o,--output,--adapter-path",
                                         [&f](const std::string& v) { f.overrides["output"] = v; },
                                         "adapter output directory (default: adapters)");
  option<std::string>(app, f, "method", "sft (default), dpo, orpo, simpo or ipo");
  option<std::string>(app, f, "sft-scope", "NLL over full sequences (default) or response tokens only");
  option<float>(app, f, "orpo-lambda", "ORPO weight of the odds-ratio term (default 0.1)");
  option<float>(app, f, "beta", "DPO/IPO/SimPO temperature (default 0.1)");
  option<float>(app, f, "simpo-gamma", "SimPO target margin (default 0.5)");
  option<float>(app, f, "learning-rate", "peak learning rate (default 2e-4 sft, 1e-5 preference)");
  option<std::string>(app, f, "lr-schedule", "cosine (default), linear or constant");
  option<int>(app, f, "warmup", "linear warmup steps (default: orpo min(10, steps/10), else 0)");
  option<int>(app, f, "iters", "optimizer steps (default: from --epochs)");
  option<int>(app, f, "epochs", "passes over the training set when --iters is 0 (default 1)");
  option<int>(app, f, "batch-size", "sequences (pairs) per micro-batch (default 1)");
  option<int>(app, f, "grad-accumulation-steps", "micro-batches per optimizer step (default 1)");
  app->add_option_function<int>("--grad-accum", [&f](int v) { f.overrides["grad_accumulation_steps"] = v; },
                                "alias of --grad-accumulation-steps");
  option<int>(app, f, "max-seq-length", "longest sequence; longer prompts are cut on the left (default 2048)");
  option<float>(app, f, "max-grad-norm", "clip the global gradient norm (default 1.0; 0 = off)");
  option<float>(app, f, "weight-decay", "AdamW decoupled weight decay (default 0)");
  option<int>(app, f, "rank", "LoRA rank (default 8 sft, 16 orpo)");
  option<float>(app, f, "scale", "LoRA scale s (default 1 sft, 2 orpo); alpha = s * rank");
  option<float>(app, f, "alpha", "PEFT lora_alpha instead of --scale (s = alpha / rank)");
  app->add_flag_function("--rs-lora", [&f](int64_t) { f.overrides["rs_lora"] = true; }, "rank-stabilised scale alpha/sqrt(rank)");
  option<float>(app, f, "lora-plus-ratio", "LoRA+: learning-rate multiplier of the B factors (default 1)");
  option<float>(app, f, "lora-dropout", "dropout on the LoRA input (default 0)");
  option<std::vector<std::string>>(app, f, "target-modules", "projections to adapt (default all seven)");
  option<int>(app, f, "num-layers", "adapt only the last N layers (default -1 = all)");
  option<int>(app, f, "segment-size", "segmented backward: layers per recompute segment (default 0 = off)");
  app->add_flag_function("--offload-boundaries", [&f](int64_t) { f.overrides["offload_boundaries"] = true; },
                         "with --segment-size on CUDA: keep segment boundaries in host memory");
  app->add_flag_function("--grad-checkpoint", [&f](int64_t) { f.overrides["grad_checkpoint"] = true; },
                         "recompute every layer in the backward (= --segment-size 1)");
  app->add_flag_function("--prefix-shared", [&f](int64_t) { f.overrides["prefix_shared"] = true; },
                         "one [prompt; chosen; rejected] forward per pair");
  option<int>(app, f, "head-chunk-size", "fused CE head vocabulary chunk (default 4096; 0 = full logits)");
  option<int>(app, f, "steps-per-eval", "validate every N steps (default: only at the end)");
  option<int>(app, f, "steps-per-report", "progress line every N steps (default 10)");
  app->add_flag_function("--save-checkpoints", [&f](int64_t) { f.overrides["save_checkpoints"] = true; },
                         "write the adapter at every evaluation under OUTPUT/checkpoints/step_N");
  option<std::string>(app, f, "resume-adapter", "warm start from this adapter (weights only)");
  app->add_option_function<std::string>("--resume", [&f](const std::string& v) { f.overrides["resume_adapter"] = v; },
                                        "alias of --resume-adapter");
  option<std::string>(app, f, "device", "cpu (default), cuda or auto: where the base weights, LoRA factors, "
                                        "optimizer state and activations live");
  option<int>(app, f, "seed", "seed of initialisation, shuffling and dropout (default 0)");
  option<int>(app, f, "threads", "CPU threads (default: all)");
  app->add_flag("-q,--quiet", f.quiet, "no progress on stderr");
  return {app, [flags] { return run(*flags); }};
}

}  // namespace brioche::cli
