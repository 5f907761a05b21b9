#include "cli/scoring_models.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/common.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/model_tokenizer.h"
#include "model/device_weights.h"
#include "ops/device.h"
#include "train/adapter_io.h"

namespace brioche::cli {

namespace fs = std::filesystem;

void ScoringFlags::add_to(CLI::App* app, const char* data_help) {
  app->add_option("-m,--model", model, "GGUF file or safetensors directory (default: SmolLM2-135M-Instruct Q4_1)");
  app->add_option("--adapter", adapters,
                  "LoRA adapter (PEFT directory or GGUF LoRA), as PATH or NAME=PATH; "
                  "repeat to compare several; the base is always scored too");
  app->add_option("-d,--data", data, data_help)->required();
  app->add_option("--batch-size", batch_size, "rows (pairs) per forward (default 4)")->check(CLI::Range(1, 4096));
  app->add_option("--max-seq-length", max_seq_length,
                  "longer rows are cut as `brioche train` cuts them: prompt "
                  "on the left (default 2048)")
      ->check(CLI::Range(2, 1 << 20));
  app->add_option("--device", device, "cpu, cuda or auto (default auto: CUDA when a GPU is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app->add_option("-t,--threads", threads, "CPU threads (default: all)")->check(CLI::Range(0, 1024));
  app->add_option("-o,--output", output, "write the results (and every row's log-probs) to this JSON file");
  app->add_flag("-q,--quiet", quiet, "no progress on stderr");
}

ScoringModels::ScoringModels(const ScoringFlags& f) : flags_(f) {
  ThreadPool::configure_global(f.threads > 0 ? f.threads : int(std::max(1u, std::thread::hardware_concurrency())));
  path_ = resolve_model_path(f.model);
  if (!fs::exists(f.data)) throw UsageError{"--data " + f.data + " not found"};
  device_ = f.device == "cpu" ? Device::CPU : ops::cuda_available() ? Device::CUDA : Device::CPU;
  if (f.device == "cuda" && !ops::cuda_available())
    throw UsageError{"--device cuda: no CUDA device (or this build has no CUDA backend: cmake --preset cuda)"};
  try {
    checkpoint_ =
        fs::is_directory(path_) ? model::load_safetensors_checkpoint(path_) : model::load_gguf_checkpoint(path_);
    tokenizer_ = engine::load_model_tokenizer(checkpoint_.gguf.get(), checkpoint_.directory);
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
  if (device_ == Device::CUDA) model::move_weights(checkpoint_, device_);
  names_.push_back("base");
  adapter_paths_.push_back("");
  for (const std::string& spec : f.adapters) {
    // NAME=PATH, unless the whole spec is a path that exists.
    const size_t eq = spec.find('=');
    const bool named = eq != std::string::npos && eq > 0 && eq + 1 < spec.size() && !fs::exists(spec);
    const std::string path = named ? spec.substr(eq + 1) : spec;
    std::string name = named ? spec.substr(0, eq) : fs::path(spec).lexically_normal().filename().string();
    if (name.empty() || name == ".") name = fs::path(spec).lexically_normal().parent_path().filename().string();
    if (name.empty() || name == "base") name = "adapter" + std::to_string(names_.size());
    if (!fs::exists(path)) throw UsageError{"--adapter " + spec + ": " + path + " not found"};
    try {
      adapters_.push_back(train::load_adapter(path, checkpoint_));
    } catch (const Error& e) {
      throw UsageError{"--adapter " + spec + ": " + e.what()};
    }
    adapters_.back()->to_device(device_);
    names_.push_back(name);
    adapter_paths_.push_back(path);
  }
  models_.push_back(std::make_unique<train::TrainModel>(checkpoint_, nullptr));
  for (auto& a : adapters_) models_.push_back(std::make_unique<train::TrainModel>(checkpoint_, a.get()));
}

train::DatasetOptions ScoringModels::dataset_options(bool preference) const {
  return {.preference = preference,
          .max_seq_length = flags_.max_seq_length,
          .tokenizer = tokenizer_.get(),
          .render = train::make_chat_renderer(checkpoint_.chat_template, *tokenizer_),
          .quiet = flags_.quiet};
}

train::ScoringOptions ScoringModels::options(size_t i) const {
  train::ScoringOptions o{.batch_size = flags_.batch_size};
  if (!flags_.quiet && isatty(STDERR_FILENO)) {
    const std::string name = names_[i];
    o.progress = [name](size_t done, size_t total) {
      std::fprintf(stderr, "\r\033[K[%s] %zu/%zu rows scored", name.c_str(), done, total);
      if (done == total) std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
    };
  }
  return o;
}

nlohmann::ordered_json ScoringModels::describe() const {
  nlohmann::ordered_json adapters = nlohmann::ordered_json::object();
  for (size_t i = 1; i < names_.size(); ++i) adapters[names_[i]] = adapter_paths_[i];
  return {{"model", path_}, {"adapters", adapters}, {"device", device_name(device_)}};
}

void finish_scoring(const ScoringFlags& flags, const std::string& text, const nlohmann::ordered_json& results) {
  std::printf("%s", text.c_str());
  if (flags.output.empty()) return;
  std::ofstream out(flags.output, std::ios::trunc);
  if (!out.good()) throw UsageError{"--output " + flags.output + ": cannot write"};
  out << results.dump(1) << "\n";
  std::printf("results written to %s\n", flags.output.c_str());
}

}  // namespace brioche::cli
