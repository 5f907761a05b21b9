// The prefix cache's half for hybrid models: recurrent-state snapshots.
//
// A cached K/V block says nothing of the recurrent state of a
// linear-attention layer at its end, so hybrid models reuse a prefix only
// up to a block boundary where a snapshot of that state was kept. The
// scheduler takes one at every block boundary a prompt's prefill crosses
// (an ops::StateCheckpoint inside the forward's rows), keyed by the
// chained hash of the block that ends there, and a later prompt that
// matches those blocks starts from a copy of the deepest one. Snapshots
// live in state slots of the model's cache after the running sequences'
// slots (ModelRunner::state_snapshot_count), so they come from the same
// memory budget; when all are taken, the least recently used goes, and a
// snapshot goes with its block when the prefix cache evicts that block
// (drop).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/block_allocator.h"
#include "engine/model_runner.h"

namespace brioche::engine {

struct StateSnapshotStats {
  int32_t slots = 0;
  int32_t kept = 0;       // slots holding a snapshot now
  uint64_t saved = 0;     // snapshots published
  uint64_t restored = 0;  // prompts started from one
  uint64_t replaced = 0;  // taken over for a newer one (LRU)
  uint64_t dropped = 0;   // freed with their block
};

class StateSnapshots {
 public:
  explicit StateSnapshots(ModelRunner& runner);

  // The snapshot of the state after the prefix whose last block has `hash`
  // (marked as just used), if one is kept.
  std::optional<int32_t> find(BlockHash hash);
  // Whether one is kept or on its way (reserved) for `hash`.
  bool contains(BlockHash hash) const;
  // A slot for the snapshot after the prefix `hash`, which the next forward
  // writes (ops::StateCheckpoint): a free slot, else the least recently
  // used snapshot's. It is held until publish or release; nullopt when
  // every slot is held.
  std::optional<int32_t> reserve(BlockHash hash);
  // A slot for a state kept for a while by one sequence (speculation's
  // state before its drafts), held until release; nullopt when every slot
  // is held.
  std::optional<int32_t> reserve_scratch() { return reserve(kNoHash); }
  // The forward has written the reserved `slot`: it is the snapshot of its hash.
  void publish(int32_t slot);
  // Gives a reserved slot back unwritten.
  void release(int32_t slot);
  // The prefix cache evicted the block with `hash`: its snapshot goes too.
  void drop(BlockHash hash);
  // Copies snapshot `snapshot` into `state_slot`.
  void restore(int32_t snapshot, int32_t state_slot);
  // Copies a scratch slot into `state_slot`.
  void restore_scratch(int32_t scratch, int32_t state_slot) { runner_.copy_state(scratch, state_slot); }

  StateSnapshotStats stats() const;

 private:
  static constexpr BlockHash kNoHash = 0;  // chain_block_hash never returns 0
  enum class Use { Free, Reserved, Kept };
  struct Entry {
    BlockHash hash = 0;
    int32_t slot = 0;
    Use use = Use::Free;
    uint64_t last_use = 0;
  };
  Entry& entry_of(int32_t slot);

  ModelRunner& runner_;
  std::vector<Entry> entries_;  // one per snapshot slot
  uint64_t clock_ = 0;
  StateSnapshotStats stats_;
};

}  // namespace brioche::engine
