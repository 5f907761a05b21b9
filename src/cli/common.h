// Pieces every subcommand shares: the default model, exit codes, flag groups.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "core/tensor.h"

namespace brioche::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the job failed (I/O, model, runtime)
inline constexpr int kExitInterrupted =
    130;  // stopped by SIGINT/SIGTERM after saving what it had (128 + SIGINT, as shells report)
inline constexpr int kExitUsage = 2;  // the user asked for something invalid

// A user error (bad flag value, missing file): printed as one line, exit 2.
struct UsageError {
  std::string message;
};

// $BRIOCHE_MODEL, else the model scripts/setup.sh fetches.
std::string default_model_path();

// Resolves a -m argument: "" means the default model; a missing path is a
// UsageError that says how to get the default model or what was expected.
std::string resolve_model_path(const std::string& flag_value);

// Flags shared by the commands that load a model.
struct ModelFlags {
  std::string model;
  int threads = 0;                       // 0: all hardware threads
  std::string device = "auto";           // auto | cpu | cuda
  std::string adapter;                   // PEFT LoRA adapter directory, merged at load
  std::string weights_dtype = "stored";  // stored | f32 | f16 | bf16: every weight matrix converted at load
  // --tensor-parallel N: the model split over N GPUs, one process each
  // (cli/tensor_parallel.h). tp_rank/tp_master are the hidden flags a
  // worker is started with (or set by hand, one process per rank, e.g. on
  // several nodes); tp_rank −1 means "launch the workers myself".
  int tensor_parallel = 1;
  int tp_rank = -1;
  std::string tp_master;
  void add_to(CLI::App& app);
  // --device resolved: auto is CUDA when this build has it, a GPU is
  // present and the model's architecture has CUDA kernels
  // (model::Model::has_cuda_kernels), else the CPU; "cuda" without a GPU is
  // a UsageError.
  Device resolved_device() const;
  // Sizes the CPU thread pool; call once, before loading.
  void apply() const;
};

}  // namespace brioche::cli
