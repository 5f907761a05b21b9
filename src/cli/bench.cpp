// `brioche bench`: prompt-processing and generation speed and peak memory,
// measured on the model forward itself (no sampling, no HTTP), as a table.
//
//   pp N : one forward over an N-token prompt (a fresh sequence each repeat)
//   tg N : N single-token decode steps after a short prompt
//   tg N xB: B sequences decoding together (aggregate tokens/s)
//   engine tg N xB (--engine): B requests of N tokens through the engine
//     (scheduler, sampling with --temperature/--top-k/--top-p, detokenizing);
//     on CUDA sampled on the device unless BRIOCHE_CUDA_SAMPLING=0
//   with --speculative/--draft-model: only generation through the engine
//     with and without speculation, alternating (cli/bench_speculative.h)
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_speculative.h"
#include "cli/common.h"
#include "cli/load_engine.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/device_sampler.h"
#include "engine/engine.h"
#include "model/model.h"
#include "ops/device.h"

namespace brioche::cli {

namespace {

struct BenchFlags {
  ModelFlags model;
  std::vector<int> prompt_lengths{128};
  std::vector<int> generate_lengths{64};
  std::vector<int> batch_sizes{1};
  int repetitions = 3;
  bool engine = false;
  float temperature = 0.8f;
  int top_k = 50;
  float top_p = 0.95f;
  SpeculativeFlags speculative;  // with --speculative/--draft-model: the with/without comparison only
  std::vector<std::string> spec_prompts;
};

// One sequence's slice of the KV cache: a contiguous run of blocks.
struct BenchSequence {
  std::vector<int32_t> block_table;
  int32_t n_past = 0;
};

class BenchRig {
 public:
  BenchRig(model::Model& model, int max_sequences, int max_positions) : model_(model) {
    const int block = 16;
    blocks_per_sequence_ = (max_positions + block - 1) / block;
    // f16, as the engine's default cache (engine::KvSizing).
    const bool on_gpu = model.device() == Device::CUDA;
    cache_ = std::make_unique<model::KvCache>(
        model.config(),
        model::KvCacheOptions{.block_size = block,
                              .n_blocks = blocks_per_sequence_ * max_sequences,
                              .dtype = DType::F16,
                              .device = model.device(),
                              // hybrid models: sequence s keeps its recurrent state in slot s
                              .n_state_slots = model.config().has_sequence_state() ? max_sequences : 0});
    if (on_gpu) logits_ = ops::zeros(DType::F32, {int64_t(max_sequences), model.config().vocab_size}, Device::CUDA);
    sequences_.resize(max_sequences);
    for (int s = 0; s < max_sequences; ++s) {
      for (int b = 0; b < blocks_per_sequence_; ++b) sequences_[s].block_table.push_back(s * blocks_per_sequence_ + b);
    }
  }

  void reset() {
    for (auto& s : sequences_) s.n_past = 0;
  }

  // Appends tokens[s] to sequence s for s in [0, tokens.size()), in one forward.
  void step(const std::vector<std::vector<int32_t>>& tokens) {
    model::ForwardBatch batch;
    for (size_t s = 0; s < tokens.size(); ++s) {
      auto& seq = sequences_[s];
      batch.sequences.push_back({.first_row = batch.n_rows(),
                                 .n_rows = int32_t(tokens[s].size()),
                                 .n_past = seq.n_past,
                                 .block_table = seq.block_table,
                                 .state_slot = int32_t(s)});
      for (size_t i = 0; i < tokens[s].size(); ++i) {
        batch.tokens.push_back(tokens[s][i]);
        batch.positions.push_back(seq.n_past + int32_t(i));
        batch.wants_logits.push_back(i + 1 == tokens[s].size());
      }
      seq.n_past += int32_t(tokens[s].size());
    }
    model_.forward(batch, *cache_, logits_);
    ops::synchronize(model_.device());  // time the work, not its launch
  }

  // Greedy next token of each sequence from the last step's logits
  // (computed where the logits are: only the ids cross from the GPU).
  std::vector<int32_t> argmax() const {
    std::vector<int32_t> out(size_t(logits_.dim(0)));
    ops::argmax_rows(logits_, out);
    return out;
  }

 private:
  model::Model& model_;
  int blocks_per_sequence_ = 0;
  std::unique_ptr<model::KvCache> cache_;
  std::vector<BenchSequence> sequences_;
  Tensor logits_;
};

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

struct Measurement {
  double mean = 0, stddev = 0;
};

Measurement summarize(const std::vector<double>& rates) {
  Measurement m;
  m.mean = std::accumulate(rates.begin(), rates.end(), 0.0) / rates.size();
  for (double r : rates) m.stddev += (r - m.mean) * (r - m.mean);
  m.stddev = rates.size() > 1 ? std::sqrt(m.stddev / (rates.size() - 1)) : 0.0;
  return m;
}

int bench(const BenchFlags& flags) {
  const std::string path = resolve_model_path(flags.model.model);
  std::shared_ptr<model::Model> model = load_model(flags.model);
  const int vocab = model->config().vocab_size;
  const int max_prompt = *std::max_element(flags.prompt_lengths.begin(), flags.prompt_lengths.end());
  const int max_gen = *std::max_element(flags.generate_lengths.begin(), flags.generate_lengths.end());
  const int max_batch = *std::max_element(flags.batch_sizes.begin(), flags.batch_sizes.end());
  BenchRig rig(*model, max_batch, std::max(max_prompt, max_gen + 16) + 1);
  std::mt19937 rng(1234);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
    return t;
  };
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };

  std::printf("model: %s (%s, %.1f MiB), device: %s, threads: %d\n", path.c_str(), model->config().architecture.c_str(),
              model->weight_bytes() / 1048576.0, device_name(model->device()), ThreadPool::global().size());
  if (flags.speculative.enabled()) {
    run_speculative_bench(model,
                          {.model_flags = &flags.model,
                           .speculative = &flags.speculative,
                           .prompt_files = flags.spec_prompts,
                           .batch_sizes = flags.batch_sizes,
                           .max_tokens = max_gen,
                           .repetitions = flags.repetitions,
                           .sampling = {.temperature = flags.temperature, .top_k = flags.top_k, .top_p = flags.top_p}});
    std::printf("peak RSS: %.1f MiB\n", peak_rss_mib());
    return kExitOk;
  }
  std::printf("| %-12s | %14s | %10s |\n", "test", "tokens/s", "stddev");
  std::printf("|--------------|----------------|------------|\n");
  auto row = [](const std::string& test, Measurement m) {
    std::printf("| %-12s | %14.2f | %10.2f |\n", test.c_str(), m.mean, m.stddev);
    std::fflush(stdout);
  };

  rig.reset();
  rig.step({random_tokens(8)});  // warm-up: page in weights, spin up threads
  // Each test runs once more than timed, first: the first run of a shape
  // pays one-time costs (GEMM algorithm choice, allocator growth, CUDA graph
  // capture) that are not its speed. llama-bench warms up the same way.
  for (int n : flags.prompt_lengths) {
    std::vector<double> rates;
    for (int r = -1; r < flags.repetitions; ++r) {
      rig.reset();
      auto tokens = random_tokens(n);
      auto start = Clock::now();
      rig.step({tokens});
      if (r >= 0) rates.push_back(n / seconds_since(start));
    }
    row("pp " + std::to_string(n), summarize(rates));
  }
  for (int b : flags.batch_sizes) {
    for (int n : flags.generate_lengths) {
      std::vector<double> rates;
      for (int r = -1; r < flags.repetitions; ++r) {
        rig.reset();
        std::vector<std::vector<int32_t>> prompts(b);
        for (auto& p : prompts) p = random_tokens(4);
        rig.step(prompts);
        auto start = Clock::now();
        for (int i = 0; i < n; ++i) {
          auto next = rig.argmax();
          std::vector<std::vector<int32_t>> step(b);
          for (int s = 0; s < b; ++s) step[s] = {next[s]};
          rig.step(step);
        }
        if (r >= 0) rates.push_back(double(n) * b / seconds_since(start));
      }
      row("tg " + std::to_string(n) + (b > 1 ? " x" + std::to_string(b) : ""), summarize(rates));
    }
  }
  if (flags.engine) {
    // The engine's own KV cache, with room for every request at once.
    engine::EngineOptions options;
    options.kv = {.block_size = 16, .n_blocks = max_batch * ((max_gen + 16) / 16 + 2) + 8, .max_context = max_gen + 48};
    options.scheduler.max_running = std::max(64, max_batch);
    auto engine = engine::Engine::from_model(model, options);
    const bool on_device = model->device() == Device::CUDA && engine::DeviceSampler::enabled_by_environment();
    std::printf("engine: T %.2f, top-k %d, top-p %.2f, sampled on the %s\n", flags.temperature, flags.top_k,
                flags.top_p, on_device ? "device" : "host");
    auto run_requests = [&](int b, int n, uint64_t seed) {
      std::vector<engine::GenerationRequest> requests;
      for (int s = 0; s < b; ++s) {
        engine::GenerationRequest request;
        request.prompt_tokens = random_tokens(16);
        request.max_tokens = n;
        request.ignore_eos = true;
        request.sampling = {
            .temperature = flags.temperature, .top_k = flags.top_k, .top_p = flags.top_p, .seed = seed + uint64_t(s)};
        requests.push_back(std::move(request));
      }
      // Together: the engine's first step sees all of them, so the batch
      // prefills and then decodes as one (B requests arriving at once).
      std::vector<std::shared_ptr<engine::RequestHandle>> handles = engine->submit_all(std::move(requests));
      size_t generated = 0;
      for (auto& h : handles) {
        while (std::optional<engine::GenerationEvent> e = h->next()) {
          if (e->finish == engine::FinishReason::Error) fail("bench: engine request failed: ", e->error);
          generated += e->tokens.size();
        }
      }
      return generated;
    };
    // As above, each test runs once untimed first: on CUDA that records
    // the decode graphs its steps need (one per batch bucket and block-table
    // width, which doubles as the sequences grow).
    for (int b : flags.batch_sizes) {
      for (int n : flags.generate_lengths) {
        std::vector<double> rates;
        for (int r = -1; r < flags.repetitions; ++r) {
          auto start = Clock::now();
          const size_t generated = run_requests(b, n, uint64_t(r + 1) * 1000);
          if (r >= 0) rates.push_back(double(generated) / seconds_since(start));
        }
        row("engine tg " + std::to_string(n) + (b > 1 ? " x" + std::to_string(b) : ""), summarize(rates));
      }
    }
  }
  std::printf("peak RSS: %.1f MiB\n", peak_rss_mib());
  return kExitOk;
}

}  // namespace

Subcommand add_bench_command(CLI::App& root) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* app = root.add_subcommand("bench", "measure prompt processing and generation speed and peak memory");
  flags->model.add_to(*app);
  app->add_option("-p,--prompt-tokens", flags->prompt_lengths, "prompt lengths to time (repeatable)")
      ->check(CLI::Range(1, 65536));
  app->add_option("-n,--gen-tokens", flags->generate_lengths, "generation lengths to time (repeatable)")
      ->check(CLI::Range(1, 65536));
  app->add_option("-b,--batch", flags->batch_sizes, "sequences decoding together (repeatable)")
      ->check(CLI::Range(1, 1024));
  app->add_option("-r,--repetitions", flags->repetitions, "repeats per test")->check(CLI::Range(1, 1000));
  app->add_flag("--engine", flags->engine,
                "also time generation through the engine (scheduler, sampling, detokenizing; prompt of 16 tokens)");
  app->add_option("--temperature", flags->temperature, "--engine: sampling temperature")->check(CLI::Range(0.0, 100.0));
  app->add_option("--top-k", flags->top_k, "--engine: top-k (0: off)")->check(CLI::Range(0, 1 << 30));
  app->add_option("--top-p", flags->top_p, "--engine: top-p (1: off)")->check(CLI::Range(0.0, 1.0));
  flags->speculative.add_to(*app);
  app->add_option("--spec-prompt", flags->spec_prompts,
                  "with --speculative: a text file sent as a chat prompt (repeatable; default: an editing prompt)");
  return {app, [flags] { return bench(*flags); }};
}

}  // namespace brioche::cli
