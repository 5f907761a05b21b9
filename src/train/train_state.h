// A checkpoint that continues a run exactly: beside the adapter (PEFT
// layout) a checkpoint folder holds
//   trainer_state.json      step, the data order and its cursor, the RNG, the
//                           running loss, tokens, evaluations so far
//   optimizer.safetensors   AdamW's moments m_a, v_a, m_b, v_b (f32) and its step
// so that `brioche train --resume DIR` gives, bit for bit, the adapter the
// uninterrupted run gives (on the CPU; tests/train/trainer_test.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/optimizer.h"

namespace brioche::train {

struct TrainState {
  int step = 0;                 // optimizer steps done
  std::mt19937_64 rng;          // shuffles the data order each epoch
  std::vector<int> order;       // this epoch's order of the training examples
  size_t cursor = 0;            // next position in `order`
  double train_loss_sum = 0.0;  // since the last evaluation
  int train_loss_n = 0;
  int64_t tokens_done = 0;
  double seconds = 0.0;  // training time before this process
  nlohmann::json evals = nlohmann::json::array();
  double best_margin = 0.0;
  int best_margin_step = -1;
  // Early stopping and keep-best: the best value of the metric they follow
  // (TrainConfig::metric_for_best) over the evaluations after step 0.
  std::string best_metric_name = "eval_loss";
  double best_metric = 0.0;
  int best_metric_step = -1;  // -1: none yet
  int evals_without_improvement = 0;
};

inline constexpr const char* kTrainStateFile = "trainer_state.json";

// Whether `dir` holds a resumable checkpoint (trainer_state.json).
bool has_train_state(const std::string& dir);

// Writes trainer_state.json and optimizer.safetensors into `dir` (the adapter is the caller's).
void save_train_state(const std::string& dir, const TrainState& state, const AdamW& optimizer);

// Reads them back; the optimizer's moments are restored in place. Errors
// name the file and what does not fit (another adapter's shape, a data set
// of another size).
TrainState load_train_state(const std::string& dir, AdamW& optimizer, int n_examples);

}  // namespace brioche::train
