#include "engine/state_snapshots.h"

#include <algorithm>

namespace brioche::engine {

StateSnapshots::StateSnapshots(ModelRunner& runner) : runner_(runner) {
  const int32_t first = runner.state_slot_count();
  for (int32_t i = 0; i < runner.state_snapshot_count(); ++i) entries_.push_back({.slot = first + i});
}

std::optional<int32_t> StateSnapshots::find(BlockHash hash) {
  for (Entry& e : entries_) {
    if (e.last_use != 0 && e.hash == hash) {
      e.last_use = ++clock_;
      return e.slot;
    }
  }
  return std::nullopt;
}

void StateSnapshots::save(BlockHash hash, int32_t state_slot) {
  if (entries_.empty()) return;
  auto it =
      std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.last_use != 0 && e.hash == hash; });
  if (it != entries_.end()) {  // the same prefix again: the state after the same tokens is already kept
    it->last_use = ++clock_;
    return;
  }
  it = std::min_element(entries_.begin(), entries_.end(),
                        [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
  runner_.copy_state(state_slot, it->slot);
  it->hash = hash;
  it->last_use = ++clock_;
  ++saved_;
}

void StateSnapshots::restore(int32_t snapshot, int32_t state_slot) {
  runner_.copy_state(snapshot, state_slot);
  ++restored_;
}

}  // namespace brioche::engine
