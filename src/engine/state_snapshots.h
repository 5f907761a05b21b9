// The prefix cache's half for hybrid models: recurrent-state snapshots.
//
// A cached K/V block says nothing of the recurrent state of a
// linear-attention layer at its end, so hybrid models reuse a prefix only
// where a snapshot of that state was kept: the scheduler saves a sequence's
// state when its prefill reaches its prompt's last reusable boundary
// (engine/scheduler.cpp snapshot_position), keyed by the chained hash of
// the block that ends there, and a later prompt that matches those blocks
// starts from a copy of it. Snapshots live in state slots of the model's
// cache after the running sequences' slots (ModelRunner::
// state_snapshot_count); when all are taken, the least recently used goes.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/block_allocator.h"
#include "engine/model_runner.h"

namespace brioche::engine {

class StateSnapshots {
 public:
  explicit StateSnapshots(ModelRunner& runner);

  // The snapshot of the state after the prefix whose last block has `hash`
  // (marked as just used), if one is kept.
  std::optional<int32_t> find(BlockHash hash);
  // Keeps the state in `state_slot` as the one after the prefix `hash`.
  void save(BlockHash hash, int32_t state_slot);
  // Copies snapshot `snapshot` into `state_slot`.
  void restore(int32_t snapshot, int32_t state_slot);

  uint64_t saved() const { return saved_; }
  uint64_t restored() const { return restored_; }

 private:
  struct Entry {
    BlockHash hash = 0;
    int32_t slot = 0;
    uint64_t last_use = 0;  // 0: empty
  };
  ModelRunner& runner_;
  std::vector<Entry> entries_;  // one per snapshot slot
  uint64_t clock_ = 0;
  uint64_t saved_ = 0, restored_ = 0;
};

}  // namespace brioche::engine
