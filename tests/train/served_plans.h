// Sequences run together through a model's forward for the served-adapter
// tests: each brings its prompt (every row's logits wanted), then one decode
// row a step, with its own adapter (or none) and recurrent-state slot.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/served_adapter.h"

namespace brioche::train::testing {

struct Plan {
  std::vector<int32_t> prompt, decodes;
  const model::ServedAdapter* adapter = nullptr;
};

struct PlanCache {
  int32_t block_size = 16, n_blocks = 64;
};

// Runs the plans together, one forward per step (all prompts, then one
// decode row each), sequence s in state slot s; returns each plan's logits
// [prompt rows + decodes, vocab], flattened, on the host.
inline std::vector<std::vector<float>> run_plans(model::Model& m, const std::vector<Plan>& plans,
                                                 PlanCache shape = {}) {
  model::KvCache cache(m.config(), {.block_size = shape.block_size,
                                    .n_blocks = shape.n_blocks,
                                    .dtype = DType::F32,
                                    .device = m.device(),
                                    .n_state_slots = int32_t(plans.size())});
  const int64_t vocab = m.config().vocab_size;
  std::vector<std::vector<int32_t>> blocks(plans.size());
  std::vector<int32_t> n_past(plans.size(), 0);
  std::vector<std::vector<float>> out(plans.size());
  int32_t next_block = 0;
  size_t steps = 0;
  for (const Plan& p : plans) steps = std::max(steps, p.decodes.size() + 1);
  for (size_t step = 0; step < steps; ++step) {
    model::ForwardBatch batch;
    std::vector<size_t> in_batch;
    for (size_t s = 0; s < plans.size(); ++s) {
      const Plan& p = plans[s];
      if (step > p.decodes.size()) continue;
      const std::vector<int32_t> rows = step == 0 ? p.prompt : std::vector<int32_t>{p.decodes[step - 1]};
      while (int32_t(blocks[s].size()) * cache.block_size() < n_past[s] + int32_t(rows.size()))
        blocks[s].push_back(next_block++);
      batch.sequences.push_back({.first_row = batch.n_rows(),
                                 .n_rows = int32_t(rows.size()),
                                 .n_past = n_past[s],
                                 .block_table = blocks[s],
                                 .adapter = p.adapter,
                                 .state_slot = int32_t(s)});
      for (size_t i = 0; i < rows.size(); ++i) {
        batch.tokens.push_back(rows[i]);
        batch.positions.push_back(n_past[s] + int32_t(i));
        batch.wants_logits.push_back(1);
      }
      in_batch.push_back(s);
    }
    Tensor logits;
    m.forward(batch, cache, logits);
    int64_t row = 0;
    for (size_t i = 0; i < in_batch.size(); ++i) {
      const size_t s = in_batch[i];
      const int32_t n = batch.sequences[i].n_rows;
      out[s].insert(out[s].end(), logits.row_as<float>(row), logits.row_as<float>(row) + n * vocab);
      row += n;
      n_past[s] += n;
    }
  }
  return out;
}

}  // namespace brioche::train::testing
