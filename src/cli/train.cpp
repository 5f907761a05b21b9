// `brioche train`: LoRA fine-tuning (SFT, DPO, ORPO, SimPO, IPO) on a JSONL
// data directory; writes a PEFT-layout adapter, checkpoints and metrics.json.
// Options come from flags and/or --config file.json|file.toml (same names; flags win).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/train_report.h"
#include "cli/workers.h"
#include "cli/subcommands.h"
#include "core/env_switch.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/device_weights.h"
#include "model/gemma4_weights.h"
#include "model/load_qwen35_gguf.h"
#include "model/qwen35_weights.h"
#include "model/weights.h"
#include "ops/collective.h"
#include "ops/device.h"
#include "ops/rendezvous.h"
#include "engine/model_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "jobs/job_spec.h"
#include "train/config_file.h"
#include "train/train_state.h"
#include "train/trainer.h"

namespace brioche::cli {

namespace {

struct TrainFlags {
  std::string config_file;
  nlohmann::json overrides = nlohmann::json::object();  // flags given on the command line
  bool quiet = false;
  bool overwrite = false;  // --overwrite: replace an earlier run's files in the output directory
  // Data parallel (--gpus N): how a worker rank (or a rank started by hand,
  // e.g. on another node) joins; −1: launch the workers myself.
  int dp_rank = -1;
  std::string dp_master;
  std::string report_to;   // --report-to http://HOST:PORT: the run shows in that server's job list
  std::string report_key;  // --report-key (default $BRIOCHE_API_KEY)
};

const WorkerFlags kDpFlags{.rank_flag = "--dp-rank", .master_flag = "--dp-master"};

// --gpus N: this process is rank 0 (or the rank --dp-rank names) of N, one
// GPU each; rank 0 starts the others as copies of itself.
struct DataParallelJob {
  int rank = 0;
  int size = 1;
  std::string master;
  std::unique_ptr<WorkerWatchdog> watchdog;  // rank 0 of a job it launched
};

DataParallelJob start_data_parallel(const TrainFlags& flags, const train::TrainConfig& config) {
  DataParallelJob job{.rank = flags.dp_rank < 0 ? 0 : flags.dp_rank, .size = config.gpus};
  const std::string n = std::to_string(config.gpus);
  if (config.resolved_device() != Device::CUDA) throw UsageError{"--gpus " + n + " trains on GPUs: add --device cuda"};
  if (job.rank >= job.size) throw UsageError{"--dp-rank " + std::to_string(job.rank) + " outside --gpus " + n};
  const bool launcher = flags.dp_rank < 0;
  const int visible = ops::device_count();
  if (launcher && job.size > visible)
    throw UsageError{"--gpus " + n + ": this machine has " + std::to_string(visible) +
                     " GPU(s); start ranks on other nodes by hand with --dp-rank and --dp-master (docs/training.md)"};
  if (!launcher && flags.dp_master.empty()) throw UsageError{"--dp-rank needs --dp-master HOST:PORT of rank 0"};
  job.master = launcher ? "127.0.0.1:" + std::to_string(ops::free_tcp_port()) : flags.dp_master;
  if (launcher && job.size > 1) {
    std::vector<pid_t> workers;
    for (int r = 1; r < job.size; ++r) workers.push_back(start_worker(kDpFlags, r, job.master));
    job.watchdog = std::make_unique<WorkerWatchdog>(std::move(workers), "data-parallel training rank");
  }
  ops::select_device(job.rank % visible);  // rank r uses local GPU r mod (GPUs on its node)
  return job;
}

// SIGINT/SIGTERM: the first asks the trainer to stop after the current step
// and write everything (Trainer::set_stop_flag); the handler then resets
// itself (SA_RESETHAND), so a second one ends the process at once.
std::atomic<bool> g_stop_requested{false};

void on_stop_signal(int) {
  g_stop_requested.store(true);
  static const char kMessage[] =
      "\ntrain: stopping after this step and writing the adapter and a checkpoint (again to quit now)\n";
  ssize_t ignored = write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  (void)ignored;
}

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  // SIGHUP: the server that started this trainer went away (its jobs runner
  // sets PR_SET_PDEATHSIG; a multi-threaded parent sends it once per exiting
  // thread), so it stops after this step every time, never at once.
  struct sigaction hangup = action;
  hangup.sa_flags = 0;
  sigaction(SIGHUP, &hangup, nullptr);
}

// The files a run writes into its output directory; --overwrite removes them
// (and nothing else the directory holds).
void clear_earlier_run(const std::filesystem::path& out) {
  for (const char* name : {"adapter_config.json", "adapter_model.safetensors", "metrics.json", "log.jsonl",
                           train::kTrainStateFile, "optimizer.safetensors", "checkpoints", "best"})
    std::filesystem::remove_all(out / name);
}

// An output directory that holds an earlier run is refused unless the user
// says what to do with it: --overwrite, or --resume (which continues there).
void check_output_directory(const train::TrainConfig& config, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(config.output, ec)) return;
  if (!fs::is_directory(config.output, ec))
    throw UsageError{"--output " + config.output + " exists and is not a directory"};
  if (fs::is_empty(config.output, ec) || !config.resume.empty()) return;
  if (!overwrite)
    throw UsageError{"--output " + config.output +
                     " is not empty (an earlier run?): pass --overwrite to replace its adapter, metrics and "
                     "checkpoints, --resume " +
                     config.output + "/checkpoints/step_N to continue it, or another --output"};
  clear_earlier_run(config.output);
}

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
  std::optional<DataParallelJob> job;
  if (config.gpus > 1 || flags.dp_rank >= 0) {
    job = start_data_parallel(flags, config);
    if (job->rank != 0) config.quiet = true;  // rank 0 reports for the job
  }
  ThreadPool::configure_global(config.threads > 0 ? config.threads
                                                  : int(std::max(1u, std::thread::hardware_concurrency())));

  // Gemma 4 and Qwen 3.5 have their own checkpoints and training stacks (CPU only: --device auto picks
  // the CPU for them); the Llama family shares model::Checkpoint.
  const bool gemma4 = std::filesystem::is_directory(config.model) && model::is_gemma4_directory(config.model);
  const bool qwen35 = std::filesystem::is_directory(config.model) ? model::is_qwen35_directory(config.model)
                                                                  : model::is_qwen35_gguf(config.model);
  const char* own_stack = gemma4 ? "Gemma 4" : qwen35 ? "Qwen 3.5" : nullptr;
  if (own_stack && config.device == "auto") config.device = "cpu";
  const Device device = config.resolved_device();
  if (device == Device::CUDA && !ops::cuda_available())
    throw UsageError{
        "--device cuda: no CUDA device is visible, or this build has no CUDA backend "
        "(configure with --preset cuda)"};
  if (own_stack && device != Device::CPU)
    throw UsageError{config.model + ": " + own_stack + " trains on the CPU only in this build (asked for " +
                     device_name(device) + "; pass --device cpu)"};
  if (own_stack && job)
    throw UsageError{config.model + ": " + own_stack + " trains without data parallelism in this build"};
  model::Checkpoint ck;
  model::Gemma4Checkpoint g4;
  model::Qwen35Checkpoint q35;
  if (gemma4)
    g4 = model::load_gemma4_checkpoint(config.model);
  else if (qwen35)
    q35 = model::load_qwen35_checkpoint(config.model);
  else
    ck = std::filesystem::is_directory(config.model) ? model::load_safetensors_checkpoint(config.model)
                                                     : model::load_gguf_checkpoint(config.model);
  const std::string& model_dir = gemma4 ? g4.directory : qwen35 ? q35.directory : ck.directory;
  const std::string& chat_template = gemma4 ? g4.chat_template : qwen35 ? q35.chat_template : ck.chat_template;
  auto tok = engine::load_model_tokenizer(gemma4 ? nullptr : qwen35 ? q35.gguf.get() : ck.gguf.get(), model_dir);
  // Base weights go to the device once, in their stored dtype (bf16, f16, quantized blocks).
  if (device == Device::CUDA) model::move_weights(ck, device);
  train::DatasetOptions options{.preference = train::is_preference(config.method),
                                .max_seq_length = config.max_seq_length,
                                .tokenizer = tok.get(),
                                .render = train::make_chat_renderer(chat_template, *tok),
                                .quiet = config.quiet};
  train::TrainData data{.train = train::load_dataset(train_path, options)};
  try {
    if (config.test_split > 0) {  // before anything counts the training rows
      data.test = train::split_off(data.train, config.test_split, uint64_t(config.seed));
      if (!config.quiet)
        std::fprintf(stderr, "train: %zu of %zu rows of %s held out as the test set (test_split %g, seed %d)\n",
                     data.test->size(), data.test->size() + data.train.size(), train_path.c_str(),
                     double(config.test_split), config.seed);
    }
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
  const int64_t train_rows = int64_t(data.train.size());
  if (std::filesystem::exists(valid_path)) data.valid = train::load_dataset(valid_path, options);
  if (!config.test_file.empty()) {
    if (!std::filesystem::is_regular_file(config.test_file))
      throw UsageError{"--test-file " + config.test_file + ": expected a JSONL file, found none"};
    data.test = train::load_dataset(config.test_file, options);
  }
  if (!job || job->rank == 0) check_output_directory(config, flags.overwrite);
  std::filesystem::create_directories(config.output);
  std::unique_ptr<ops::Collective> collective;
  if (job)
    collective = ops::connect_nccl({.rank = job->rank, .size = job->size, .master = job->master, .timeout_s = 600});
  train::Trainer trainer(config,
                         gemma4   ? train::gemma4_train_base(g4)
                         : qwen35 ? train::qwen35_train_base(q35)
                                  : train::llama_train_base(ck),
                         std::move(data));
  trainer.set_data_parallel(collective.get());
  install_stop_handlers();
  trainer.set_stop_flag(&g_stop_requested);
  trainer.set_sample_decoder(
      {.decode = [&tok](std::span<const int32_t> ids) { return tok->decode(ids); }, .stop_ids = tok->eos_ids()});
  std::unique_ptr<TrainReporter> reporter;
  if (!flags.report_to.empty() && (!job || job->rank == 0)) {
    ReportTarget target = parse_report_url(flags.report_to);
    target.api_key = !flags.report_key.empty() ? flags.report_key : env_text("BRIOCHE_API_KEY");
    nlohmann::json options_json = train::config_to_json(config);
    const nlohmann::json announce = {{"model", std::filesystem::path(config.model).filename().string()},
                                     {"method", train::method_name(config.method)},
                                     {"total_steps", jobs::total_steps(options_json, train_rows)},
                                     {"config", options_json}};
    reporter = std::make_unique<TrainReporter>(target, announce, config.output + "/log.jsonl", &g_stop_requested);
    if (!config.quiet)
      std::fprintf(stderr, "train: reporting to %s as job %s\n", flags.report_to.c_str(), reporter->job_id().c_str());
  }
  train::TrainResult result;
  try {
    result = trainer.run();
  } catch (const std::exception& e) {
    if (reporter) reporter->finish("failed", e.what());
    throw;
  }
  if (reporter) reporter->finish(result.interrupted ? "interrupted" : "succeeded", "");
  // Every rank destroys its communicator (NCCL may wait there for the other
  // ranks to do the same) before rank 0 waits for the workers to exit.
  collective.reset();
  if (job && job->watchdog) {
    job->watchdog->stop_expected();  // the workers finish the same steps and exit
    job->watchdog->join();
    if (!job->watchdog->all_ok()) return kExitFailure;
  }
  return result.interrupted ? kExitInterrupted : kExitOk;
}

// Registers `--name value` that lands in overrides["name"] only when given.
template <typename T>
void option(CLI::App* app, TrainFlags& flags, const std::string& name, const std::string& help) {
  auto key = name;
  std::replace(key.begin(), key.end(), '-', '_');
  app->add_option_function<T>(
      "--" + name, [&flags, key](const T& v) { flags.overrides[key] = v; }, help);
}

}  // namespace

Subcommand add_train_command(CLI::App& root) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* app = root.add_subcommand("train", "LoRA fine-tuning: sft, dpo, orpo, simpo, ipo (PEFT adapter out)");
  TrainFlags& f = *flags;
  app->add_option("-c,--config", f.config_file,
                  "JSON or TOML (.toml) file of training options, same names (flags override it)");
  app->add_option_function<std::string>(
      "-m,--model", [&f](const std::string& v) { f.overrides["model"] = v; },
      "GGUF file or safetensors directory (default: SmolLM2-135M-Instruct Q4_1)");
  app->add_option_function<std::string>(
      "-d,--data", [&f](const std::string& v) { f.overrides["data"] = v; },
      "directory with train.jsonl (and valid.jsonl)");
  app->add_option_function<std::string>(
      "-o,--output,--adapter-path", [&f](const std::string& v) { f.overrides["output"] = v; },
      "adapter output directory (default: adapters)");
  option<std::string>(app, f, "method", "sft (default), dpo, orpo, simpo or ipo");
  option<std::string>(app, f, "sft-scope",
                      "tokens in the NLL: response (the reply only) or full (the prompt too); default as TRL: response "
                      "for sft, full for orpo");
  option<float>(app, f, "orpo-lambda", "ORPO weight of the odds-ratio term (default 0.1)");
  option<float>(app, f, "beta", "DPO/IPO/SimPO temperature (default 0.1)");
  option<float>(app, f, "simpo-gamma", "SimPO target margin (default 0.5)");
  option<float>(app, f, "rpo-alpha",
                "DPO/IPO: add this weight times the NLL of the chosen replies (TRL's rpo_alpha; default off)");
  option<float>(app, f, "learning-rate", "peak learning rate (default 2e-4 sft, 1e-5 preference)");
  option<std::string>(app, f, "lr-schedule", "cosine (default), linear or constant");
  option<int>(app, f, "warmup", "linear warmup steps (default: orpo min(10, steps/10), else 0)");
  option<int>(app, f, "iters", "optimizer steps (default: from --epochs)");
  option<int>(app, f, "epochs", "passes over the training set when --iters is 0 (default 1)");
  option<int>(app, f, "batch-size", "sequences (pairs) per micro-batch (default 1)");
  option<int>(app, f, "grad-accumulation-steps", "micro-batches per optimizer step (default 1)");
  app->add_option_function<int>(
      "--grad-accum", [&f](int v) { f.overrides["grad_accumulation_steps"] = v; },
      "alias of --grad-accumulation-steps");
  option<int>(app, f, "max-seq-length", "longest sequence; longer prompts are cut on the left (default 2048)");
  option<float>(app, f, "max-grad-norm", "clip the global gradient norm (default 1.0; 0 = off)");
  option<float>(app, f, "weight-decay", "AdamW decoupled weight decay (default 0)");
  option<int>(app, f, "rank", "LoRA rank (default 8 sft, 16 orpo)");
  option<float>(app, f, "scale", "LoRA scale s (default 1 sft, 2 orpo); alpha = s * rank");
  option<float>(app, f, "alpha", "PEFT lora_alpha instead of --scale (s = alpha / rank)");
  app->add_flag_function(
      "--rs-lora", [&f](int64_t) { f.overrides["rs_lora"] = true; }, "rank-stabilised scale alpha/sqrt(rank)");
  option<float>(app, f, "lora-plus-ratio", "LoRA+: learning-rate multiplier of the B factors (default 1)");
  option<float>(app, f, "lora-dropout", "dropout on the LoRA input (default 0)");
  option<std::vector<std::string>>(app, f, "target-modules",
                                   "projections to adapt (default q/k/v/o and gate/up/down; Qwen 3.5 also takes "
                                   "in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj, shared_expert_gate; "
                                   "MoE models experts.gate_up_proj, experts.down_proj)");
  option<int>(app, f, "num-layers", "adapt only the last N layers (default -1 = all)");
  option<int>(app, f, "segment-size", "segmented backward: layers per recompute segment (default 0 = off)");
  app->add_flag_function(
      "--offload-boundaries", [&f](int64_t) { f.overrides["offload_boundaries"] = true; },
      "with --segment-size on CUDA: keep segment boundaries in host memory");
  app->add_flag_function(
      "--offload-attention", [&f](int64_t) { f.overrides["offload_attention"] = true; },
      "with --offload-boundaries: also each layer's attention output (the recompute skips the "
      "attention; twice the host memory)");
  option<std::string>(app, f, "boundary-dtype", "segment boundaries in f32 (default) or bf16 (half the memory)");
  option<int>(app, f, "device-boundaries",
              "with --offload-boundaries: keep the last N segments' boundaries on "
              "the device (default 0)");
  app->add_flag_function(
      "--grad-checkpoint", [&f](int64_t) { f.overrides["grad_checkpoint"] = true; },
      "recompute every layer in the backward (= --segment-size 1)");
  app->add_flag_function(
      "--prefix-shared", [&f](int64_t) { f.overrides["prefix_shared"] = true; },
      "one [prompt; chosen; rejected] forward per pair");
  option<int>(app, f, "head-chunk-size", "fused CE head vocabulary chunk (default 4096; 0 = full logits)");
  option<int>(app, f, "mlp-chunk-size",
              "run the MLP over N tokens at a time, recomputing gate/up in the backward "
              "(long sequences: no [tokens, intermediate] buffers; default 0 = off)");
  option<int>(app, f, "steps-per-eval", "validate every N steps (default: only at the end)");
  option<int>(app, f, "steps-per-report", "progress line every N steps (default 10)");
  app->add_flag_function(
      "--save-checkpoints", [&f](int64_t) { f.overrides["save_checkpoints"] = true; },
      "write a resumable checkpoint at every evaluation under OUTPUT/checkpoints/step_N");
  option<int>(app, f, "save-steps", "also write a resumable checkpoint every N steps (default 0 = off)");
  option<int>(app, f, "save-total-limit", "keep only the newest K checkpoints (default 0 = all)");
  option<int>(app, f, "eval-samples",
              "at each evaluation, answer the first N evaluation prompts greedily and log them (default 0 = off)");
  option<int>(app, f, "eval-sample-tokens", "new tokens per evaluation sample (default 32)");
  option<int>(app, f, "early-stopping-patience",
              "stop after N evaluations in a row that did not improve --metric-for-best (default 0 = off)");
  option<float>(app, f, "early-stopping-threshold",
                "an evaluation must beat the best by more than this to restart the patience (default 0)");
  app->add_flag_function(
      "--keep-best", [&f](int64_t) { f.overrides["keep_best"] = true; },
      "the adapter of the evaluation best in --metric-for-best becomes the final one (OUTPUT/best)");
  option<std::string>(app, f, "metric-for-best",
                      "what --keep-best and early stopping follow: eval_loss (default) or any evaluation metric, "
                      "e.g. rewards/margins, rewards/accuracies, margin (the eval_ prefix is optional)");
  option<bool>(app, f, "greater-is-better",
               "true or false: whether a higher --metric-for-best is better (default: false for names ending in "
               "loss, else true)");
  option<int>(app, f, "eval-batches",
              "each periodic evaluation reads only the first N batches of the evaluation split (default 0 = all)");
  option<std::string>(app, f, "test-file",
                      "a held-out JSONL set evaluated once after training with the final (or best) adapter");
  option<float>(app, f, "test-split",
                "hold this fraction of train.jsonl's rows (drawn with --seed) out as the test set, e.g. 0.1");
  app->add_flag("--overwrite", f.overwrite, "replace an earlier run's adapter, metrics and checkpoints in --output");
  option<std::string>(
      app, f, "base-model-id",
      "Hugging Face id written as the adapter's base_model_name_or_path (default: from the model's metadata)");
  option<std::string>(app, f, "resume-adapter",
                      "warm start from this adapter (weights only; optimizer and schedule restart)");
  app->add_option_function<std::string>(
      "--resume",
      [&f](const std::string& v) { f.overrides[train::has_train_state(v) ? "resume" : "resume_adapter"] = v; },
      "continue a run from its checkpoint (OUTPUT/checkpoints/step_N: optimizer, schedule, data order and step "
      "restored); a plain adapter directory is a warm start (as --resume-adapter)");
  option<std::string>(app, f, "device",
                      "cpu (default), cuda or auto: where the base weights, LoRA factors, "
                      "optimizer state and activations live");
  option<int>(app, f, "gpus",
              "data parallel over N GPUs (one process each, NCCL): each takes every N-th "
              "micro-batch; N GPUs with --grad-accum A = one GPU with N*A (default 1)");
  // Hidden: how worker ranks (or ranks started by hand on other nodes) join.
  app->add_option("--dp-rank", f.dp_rank)->group("")->check(CLI::Range(0, 63));
  app->add_option("--dp-master", f.dp_master)->group("");
  option<int>(app, f, "seed", "seed of initialisation, shuffling and dropout (default 0)");
  app->add_option("--report-to", f.report_to,
                  "show this run in a brioche serve's fine-tuning job list, live: http://HOST:PORT");
  app->add_option("--report-key", f.report_key, "the server's API key for --report-to (default: $BRIOCHE_API_KEY)");
  option<int>(app, f, "threads", "CPU threads (default: all)");
  app->add_flag("-q,--quiet", f.quiet, "no progress on stderr");
  return {app, [flags] { return run(*flags); }};
}

}  // namespace brioche::cli
