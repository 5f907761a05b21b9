#include "engine/state_snapshots.h"

#include <algorithm>

#include "core/error.h"

namespace brioche::engine {

StateSnapshots::StateSnapshots(ModelRunner& runner) : runner_(runner) {
  const int32_t first = runner.state_slot_count();
  for (int32_t i = 0; i < runner.state_snapshot_count(); ++i) entries_.push_back({.slot = first + i});
}

StateSnapshots::Entry& StateSnapshots::entry_of(int32_t slot) {
  const int32_t i = slot - runner_.state_slot_count();
  BRIOCHE_CHECK(i >= 0 && i < int32_t(entries_.size()), "StateSnapshots: slot ", slot, " is not a snapshot slot");
  return entries_[size_t(i)];
}

std::optional<int32_t> StateSnapshots::find(BlockHash hash) {
  for (Entry& e : entries_) {
    if (e.use == Use::Kept && e.hash == hash) {
      e.last_use = ++clock_;
      return e.slot;
    }
  }
  return std::nullopt;
}

bool StateSnapshots::contains(BlockHash hash) const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const Entry& e) { return e.use != Use::Free && e.hash == hash; });
}

std::optional<int32_t> StateSnapshots::reserve(BlockHash hash) {
  Entry* pick = nullptr;
  for (Entry& e : entries_) {
    if (e.use == Use::Reserved) continue;
    if (e.use == Use::Free) {
      pick = &e;
      break;
    }
    if (!pick || e.last_use < pick->last_use) pick = &e;
  }
  if (!pick) return std::nullopt;
  if (pick->use == Use::Kept) ++stats_.replaced;
  pick->use = Use::Reserved;
  pick->hash = hash;
  return pick->slot;
}

void StateSnapshots::publish(int32_t slot) {
  Entry& e = entry_of(slot);
  BRIOCHE_CHECK(e.use == Use::Reserved, "StateSnapshots::publish: slot ", slot, " was not reserved");
  e.use = Use::Kept;
  e.last_use = ++clock_;
  ++stats_.saved;
}

void StateSnapshots::release(int32_t slot) {
  Entry& e = entry_of(slot);
  BRIOCHE_CHECK(e.use == Use::Reserved, "StateSnapshots::release: slot ", slot, " was not reserved");
  e.use = Use::Free;
}

void StateSnapshots::drop(BlockHash hash) {
  for (Entry& e : entries_) {
    if (e.use == Use::Kept && e.hash == hash) {
      e.use = Use::Free;
      ++stats_.dropped;
    }
  }
}

void StateSnapshots::restore(int32_t snapshot, int32_t state_slot) {
  runner_.copy_state(snapshot, state_slot);
  ++stats_.restored;
}

StateSnapshotStats StateSnapshots::stats() const {
  StateSnapshotStats s = stats_;
  s.slots = int32_t(entries_.size());
  s.kept = int32_t(std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) { return e.use == Use::Kept; }));
  return s;
}

}  // namespace brioche::engine
