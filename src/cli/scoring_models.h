// The base model and adapters that `brioche eval preference` and `brioche
// eval perplexity` score rows with: the checkpoint (on the CPU or the GPU),
// its tokenizer and chat template, and one frozen train::TrainModel per
// variant (the base, then each --adapter in order), so scoring runs the
// trainer's forward (train/sequence_scoring.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "train/dataset.h"
#include "train/lora.h"
#include "train/sequence_scoring.h"
#include "train/train_model.h"

namespace brioche::cli {

struct ScoringFlags {
  std::string model;
  std::vector<std::string> adapters;  // PATH or NAME=PATH
  std::string data;
  int batch_size = 4;
  int max_seq_length = 2048;
  std::string device = "auto";
  int threads = 0;
  std::string output;  // results JSON (per-row log-probs included), or ""
  bool quiet = false;
  void add_to(CLI::App* app, const char* data_help);
};

class ScoringModels {
 public:
  explicit ScoringModels(const ScoringFlags& flags);
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  train::DatasetOptions dataset_options(bool preference) const;

  size_t size() const { return names_.size(); }  // 1 + adapters
  const std::string& name(size_t i) const { return names_[i]; }
  train::TrainModel& model(size_t i) { return *models_[i]; }
  // Scoring options for variant i, with a progress line on a terminal's stderr.
  train::ScoringOptions options(size_t i) const;
  std::string model_path() const { return path_; }
  nlohmann::ordered_json describe() const;  // {"model", "adapters": {name: path}, "device"}

 private:
  const ScoringFlags& flags_;
  std::string path_;
  model::Checkpoint checkpoint_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::vector<std::unique_ptr<train::LoraAdapter>> adapters_;
  std::vector<std::string> names_, adapter_paths_;
  std::vector<std::unique_ptr<train::TrainModel>> models_;
  Device device_ = Device::CPU;
};

// Prints `text` and, with flags.output, writes `results` there.
void finish_scoring(const ScoringFlags& flags, const std::string& text, const nlohmann::ordered_json& results);

}  // namespace brioche::cli
