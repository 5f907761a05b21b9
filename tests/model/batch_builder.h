// Test helper: sequences with block tables over a shuffled pool of KV blocks,
// and ForwardBatch assembly for mixed prefill/decode steps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "model/forward_batch.h"

namespace brioche::model::testing {

class BlockPool {
 public:
  BlockPool(int n_blocks, uint32_t seed) {
    for (int i = 0; i < n_blocks; ++i) free_.push_back(i);
    std::mt19937 rng(seed);
    std::shuffle(free_.begin(), free_.end(), rng);  // tables are never in order
  }
  int32_t take() {
    int32_t b = free_.back();
    free_.pop_back();
    return b;
  }

 private:
  std::vector<int32_t> free_;
};

struct TestSequence {
  std::vector<int32_t> blocks;  // block table
  int32_t n_past = 0;
};

struct Step {
  TestSequence* sequence;
  std::vector<int32_t> tokens;  // rows to add
  bool all_logits = false;      // logits for every row, else only the last
};

// Builds one batch from steps (in order) and grows block tables as needed.
// Call commit() after the forward to advance n_past.
struct BatchBuilder {
  ForwardBatch batch;
  std::vector<Step> steps;

  BatchBuilder(std::vector<Step> s, BlockPool& pool, int block_size) : steps(std::move(s)) {
    for (Step& step : steps) {
      TestSequence& seq = *step.sequence;
      int32_t end = seq.n_past + int32_t(step.tokens.size());
      while (int32_t(seq.blocks.size()) * block_size < end) seq.blocks.push_back(pool.take());
      SequenceView view;
      view.first_row = batch.n_rows();
      view.n_rows = int32_t(step.tokens.size());
      view.n_past = seq.n_past;
      view.block_table = seq.blocks;
      for (size_t i = 0; i < step.tokens.size(); ++i) {
        batch.tokens.push_back(step.tokens[i]);
        batch.positions.push_back(seq.n_past + int32_t(i));
        batch.wants_logits.push_back(step.all_logits || i + 1 == step.tokens.size());
      }
      batch.sequences.push_back(view);
    }
  }
  void commit() {
    for (Step& step : steps) step.sequence->n_past += int32_t(step.tokens.size());
  }
};

}  // namespace brioche::model::testing
