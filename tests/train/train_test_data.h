// Data shared by the training tests: the goldens' folder, synthetic
// preference pairs, and a tiny random Llama the CUDA training attention takes.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "core/dtype.h"
#include "model/weights.h"
#include "tools/gen_model_lib.h"
#include "train/dataset.h"
#include "train/train_config.h"

namespace brioche::train {

inline std::string golden(const std::string& name) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/train/golden/" + name;
}

// n pairs: BOS 1 then 3-5 random prompt tokens in 3..39; chosen responses of
// 2-4 tokens in 40..42, rejected in 50..52, each closed by end_token when
// given (a model learns the preference in a few dozen steps).
inline Dataset synthetic_pairs(int n, uint32_t seed, std::optional<int32_t> end_token = 2) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> any(3, 39), good(40, 42), bad(50, 52), len(2, 4);
  Dataset ds;
  for (int i = 0; i < n; ++i) {
    TokenizedPair p{.prompt = {1}};
    for (int k = len(rng) + 1; k > 0; --k) p.prompt.push_back(any(rng));
    for (int k = len(rng); k > 0; --k) p.chosen.push_back(good(rng));
    for (int k = len(rng); k > 0; --k) p.rejected.push_back(bad(rng));
    if (end_token) p.chosen.push_back(*end_token), p.rejected.push_back(*end_token);
    ds.pairs.push_back(std::move(p));
  }
  return ds;
}

// The tiny ORPO run the trainer tests start from: in-memory data, λ 0.5, lr
// 1e-2, batches of 2 pairs, LoRA rank 4, head chunks of 13 rows, seed 3, quiet.
inline TrainConfig tiny_orpo_config(const std::string& output) {
  TrainConfig c;
  c.data = "(in memory)";
  c.output = output;
  c.method = Method::ORPO;
  c.orpo_lambda = 0.5f;
  c.learning_rate = 1e-2f;
  c.batch_size = 2;
  c.rank = 4;
  c.head_chunk_size = 13;
  c.quiet = true;
  c.seed = 3;
  return c;
}

// A tiny random Llama with head_dim 64, the CUDA training attention's smallest
// head size (the torch-golden tiny_llama has 8): 2 layers, hidden 128, 2 heads
// of 64, 1 KV head, vocab 96 (synthetic_pairs uses ids < 53); on the CPU.
inline model::Checkpoint tiny_d64_checkpoint(DType dtype = DType::F32) {
  const tools::ShapePreset tiny{"tiny-d64", "llama", 96, 128, 192, 2, 2, 1, 64, 10000.0f, false, false};
  return tools::random_checkpoint(tiny, dtype, 5);
}

}  // namespace brioche::train
