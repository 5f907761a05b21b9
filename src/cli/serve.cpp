// `brioche serve`: the OpenAI-compatible HTTP server (see server/server.h).
#include "cli/common.h"
#include "cli/load_engine.h"
#include "cli/speculative_flags.h"
#include "cli/subcommands.h"
#include "server/server.h"
#include "train/adapter_io.h"
#include "train/train_base.h"

namespace brioche::cli {

// Rows per engine step when --max-batch-tokens is not given: a GPU's
// prefill is compute bound only from a few thousand rows on (vLLM's chunked
// prefill defaults to 2048 and more); a CPU step of 512 rows already keeps
// every core busy, and a longer one delays every decoding sequence.
constexpr int kCudaBatchTokens = 2048;
constexpr int kCpuBatchTokens = 512;

Subcommand add_serve_command(CLI::App& root) {
  CLI::App* app = root.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  auto model = std::make_shared<ModelFlags>();
  auto opts = std::make_shared<server::ServerOptions>();
  auto kv_mb = std::make_shared<int>(0);
  auto batch_tokens = std::make_shared<int>(0);
  auto ctx = std::make_shared<int>(0);
  auto kv_type = std::make_shared<std::string>("f16");
  auto timeout = std::make_shared<double>(600);
  model->add_to(*app);
  app->add_option("--host", opts->host, "address to listen on")->capture_default_str();
  app->add_option("--port", opts->port, "TCP port (0: any free port)")->capture_default_str();
  app->add_option("--api-key", opts->api_key, "require 'Authorization: Bearer KEY' on /v1/*");
  app->add_option("--model-name", opts->model_name, "model id reported by /v1/models (default: file name)");
  app->add_option("--max-queue", opts->max_queue, "generation requests in flight before answering 429")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app->add_option("--max-body", opts->max_body_bytes, "request body limit in bytes (413 above)")->capture_default_str();
  app->add_option("--timeout", *timeout, "per-request timeout in seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app->add_option("--io-threads", opts->io_threads, "HTTP threads")->check(CLI::Range(1, 64))->capture_default_str();
  app->add_option("--prepare-threads", opts->prepare_threads,
                  "threads that prepare requests (chat template, tokenising, grammar compilation) off the HTTP threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app->add_option("--grammar-cache-mb", opts->grammar_cache_mb,
                  "memory the compiled-grammar cache may keep (least recently used evicted)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app->add_option("--kv-mb", *kv_mb,
                  "KV cache memory in MiB (0: fit the device: 90% of the GPU memory left after the weights and a "
                  "reserve; 256 on the CPU)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  app->add_option("--state-snapshots", opts->engine.kv.state_snapshots,
                  "hybrid models (Qwen 3.5): recurrent-state snapshot slots of the prefix cache, each as large as a "
                  "sequence's state and taken from the KV memory; more keep more block boundaries reusable, e.g. a "
                  "shared system prompt's (-1: as many as state slots; 0: no prefix reuse for them)")
      ->check(CLI::Range(-1, 4096))
      ->capture_default_str();
  app->add_option("--kv-window-blocks", opts->engine.kv.window_blocks,
                  "models with sliding-window layers (Gemma 4): KV blocks of the window pool those layers keep their "
                  "window in, freed once out of the window (-1: enough for --max-running sequences and one step, "
                  "the rest of the KV memory to the other layers; 0: no pool, every layer keeps every block)")
      ->check(CLI::Range(-1, 1 << 24))
      ->capture_default_str();
  app->add_option("--kv-cache-type", *kv_type,
                  "KV cache element type: f16, or f32 (CPU only; exact attention, twice the memory)")
      ->check(CLI::IsMember({"f16", "f32"}))
      ->capture_default_str();
  app->add_option("--ctx", *ctx, "context length (0: the model's, capped at 8192)")->check(CLI::Range(0, 1 << 20));
  app->add_option("--max-batch-tokens", *batch_tokens,
                  "rows per engine step, i.e. the prefill chunk (0: fit the device: 2048 on CUDA, 512 on the CPU)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  app->add_option("--max-running", opts->engine.scheduler.max_running, "sequences decoded together")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app->add_option("--web-dir", opts->web_dir,
                  "serve the web UI from this folder at / instead of the copy built into the binary (development; "
                  "files it lacks still come from the built-in copy)");
  auto loras = std::make_shared<std::vector<std::string>>();
  app->add_option("--lora", *loras,
                  "serve the LoRA adapter at PATH (a PEFT folder or a GGUF LoRA file) as model NAME, unmerged, beside "
                  "the base (repeatable): NAME=PATH");
  app->add_option("--lora-dir", opts->adapters.lora_dir,
                  "serve every adapter in this directory (PEFT folders by their name, .gguf LoRA files by their stem); "
                  "runtime loads must lie inside it");
  app->add_flag("--allow-runtime-lora", opts->adapters.allow_runtime,
                "enable POST /v1/load_lora_adapter and /v1/unload_lora_adapter (needs --lora-dir)");
  app->add_option("--max-loras", opts->adapters.max_resident,
                  "adapters whose factors stay on the device at once (least recently used evicted; host copies kept)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app->add_option("--max-lora-rank", opts->adapters.max_rank, "the largest adapter rank accepted")
      ->check(CLI::Range(1, 512))
      ->capture_default_str();
  const char* home = std::getenv("HOME");
  opts->jobs.data_dir = std::string(home ? home : ".") + "/.cache/brioche/server";
  app->add_option(
         "--data-dir", opts->jobs.data_dir,
         "files and fine-tuning jobs: jobs.sqlite3, uploads, each job's adapter and checkpoints (docs/jobs-api.md)")
      ->capture_default_str();
  app->add_option("--max-file-bytes", opts->jobs.max_file_bytes, "largest upload to /v1/files (413 above)")
      ->capture_default_str();
  app->add_option("--max-concurrent-jobs", opts->jobs.max_concurrent_jobs, "fine-tuning jobs training at once")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app->add_option("--max-queued-jobs", opts->jobs.max_queued_jobs,
                  "fine-tuning jobs waiting before POST /v1/fine_tuning/jobs answers 429")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  app->add_option(
         "--jobs-memory-mb", opts->jobs.memory_budget_mb,
         "memory budget of the running fine-tuning jobs together, by their estimates (0: 80% of the machine's memory)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  app->add_flag("--resume-interrupted-jobs", opts->jobs.resume_interrupted,
                "on start, resume the fine-tuning jobs a stopped server left interrupted");
  app->add_flag("--quiet", opts->quiet, "no startup banner");
  auto speculative = std::make_shared<SpeculativeFlags>();
  speculative->add_to(*app);
  return {app, [=] {
            // On a GPU, "auto": the trainer takes the GPU where the model's family trains there and the
            // CPU where it trains only there (Gemma 4, Qwen 3.5), instead of refusing the job.
            opts->jobs.default_device = model->resolved_device() == Device::CUDA ? "auto" : "cpu";
            opts->engine.kv.kv_memory_bytes = size_t(*kv_mb) << 20;  // 0: fitted to the device (KvSizing)
            opts->engine.scheduler.max_batch_tokens = *batch_tokens > 0                          ? *batch_tokens
                                                      : model->resolved_device() == Device::CUDA ? kCudaBatchTokens
                                                                                                 : kCpuBatchTokens;
            opts->engine.kv.max_context = *ctx;
            speculative->apply(opts->engine.scheduler);
            speculative->load_draft(*model, opts->engine);
            opts->engine.kv.dtype = *kv_type == "f32" ? DType::F32 : DType::F16;
            opts->request_timeout_s = *timeout;
            for (const std::string& spec : *loras) {
              const size_t eq = spec.find('=');
              if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
                throw UsageError{"--lora: expected NAME=PATH, got '" + spec + "'"};
              opts->adapters.startup.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
            }
            const bool serves_adapters = !opts->adapters.startup.empty() || !opts->adapters.lora_dir.empty();
            if (serves_adapters && (model->tensor_parallel > 1 || model->tp_rank >= 0))
              throw UsageError{"--lora and --lora-dir are not served with tensor parallelism yet"};
            std::shared_ptr<engine::Engine> engine = load_engine(*model, opts->engine);
            opts->engine.model_path = resolve_model_path(model->model);
            std::shared_ptr<model::Model> served_model = engine->model();
            const bool q8_0_factors = model::serves_q8_0_factors(*served_model, model->weights_dtype != "stored");
            opts->adapters.read = [served_model, q8_0_factors](const std::string& dir, int max_rank) {
              const bool permuted = train::has_permuted_qk(*served_model);
              auto adapter =
                  train::serving_adapter(*train::load_adapter(dir, served_model->config(), permuted, max_rank,
                                                              train::lora_shapes_of(*served_model)),
                                         Device::CPU);
              return q8_0_factors ? model::with_q8_0_factors(*adapter) : adapter;
            };
            return server::serve_until_signal(std::move(engine), *opts);
          }};
}

}  // namespace brioche::cli
