#include "grammar/pda.h"

#include "core/error.h"
#include "grammar/unique_items.h"

namespace brioche::grammar {

StackArena::StackArena() {
  table_.assign(1024, -1);
  mask_ = table_.size() - 1;
}

void StackArena::grow() {
  table_.assign(table_.size() * 2, -1);
  mask_ = table_.size() - 1;
  for (int32_t id = 0; id < size(); ++id) {
    uint64_t slot = slot_hash(nodes_[id]) & mask_;
    while (table_[slot] >= 0) slot = (slot + 1) & mask_;
    table_[slot] = id;
  }
}

int32_t StackArena::intern(int32_t state, int32_t parent, int32_t count, int32_t unique) {
  uint64_t slot = slot_hash(state, parent, count, unique) & mask_;
  for (;;) {
    int32_t id = table_[slot];
    if (id < 0) break;
    const StackNode& n = nodes_[id];
    if (n.state == state && n.parent == parent && n.count == count && n.unique == unique) return id;
    slot = (slot + 1) & mask_;
  }
  int32_t id = size();
  nodes_.push_back({state, parent, count, unique});
  table_[slot] = id;
  if (nodes_.size() * 2 > table_.size()) grow();
  return id;
}

void StackArena::erase_node(int32_t victim) {
  // Backward-shift deletion keeps linear probing chains intact.
  uint64_t slot = slot_hash(nodes_[victim]) & mask_;
  while (true) {
    int32_t id = table_[slot];
    if (id < 0) return;
    if (id == victim) break;
    slot = (slot + 1) & mask_;
  }
  uint64_t hole = slot;
  uint64_t next = (hole + 1) & mask_;
  while (table_[next] >= 0) {
    int32_t id = table_[next];
    uint64_t home = slot_hash(nodes_[id]) & mask_;
    // Move it into the hole if its home is not strictly between hole and next.
    bool between = hole <= next ? (home > hole && home <= next) : (home > hole || home <= next);
    if (!between) {
      table_[hole] = id;
      hole = next;
    }
    next = (next + 1) & mask_;
  }
  table_[hole] = -1;
}

void StackArena::truncate(int32_t n) {
  if (n >= size()) return;
  if ((size() - n) * 4 > size()) {
    nodes_.resize(n);
    std::fill(table_.begin(), table_.end(), -1);
    for (int32_t id = 0; id < n; ++id) {
      uint64_t slot = slot_hash(nodes_[id]) & mask_;
      while (table_[slot] >= 0) slot = (slot + 1) & mask_;
      table_[slot] = id;
    }
    return;
  }
  for (int32_t id = size() - 1; id >= n; --id) erase_node(id);
  nodes_.resize(n);
}

void PdaWalker::begin_generation() {
  if (++generation_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    generation_ = 1;
  }
}

void PdaWalker::visit(int32_t start, Frontier& out) {
  work_.clear();
  work_.push_back(start);
  while (!work_.empty()) {
    int32_t id = work_.back();
    work_.pop_back();
    if (static_cast<size_t>(id) >= stamp_.size()) stamp_.resize(arena_.size() + 1024, 0);
    if (stamp_[id] == generation_) continue;
    stamp_[id] = generation_;
    const StackNode n = arena_.node(id);
    const AutomatonState& st = a_.states[n.state];
    if (st.byte_begin != st.byte_end) out.nodes.push_back(id);
    for (uint32_t i = st.rule_begin; i < st.rule_end; ++i) {
      const RuleEdge& e = a_.rule_edges[i];
      int32_t ret;
      if (a_.has_unique_items && a_.rule_unique_item[e.rule]) {
        // An item starts: its return node records where (never a tail call).
        ret = moved(n, e.target, items_ != nullptr ? items_->item_starts(n.unique) : kItemInProgress);
      } else {
        // A tail call (the caller only returns after it) returns straight to
        // the caller's caller: the same stacks whatever rule made the call,
        // so configurations (and the mask compiler's DFA rows) are shared,
        // and right recursion keeps a bounded stack.
        ret = a_.states[e.target].only_returns() ? n.parent : moved(n, e.target);
      }
      work_.push_back(arena_.intern(a_.rule_start[e.rule], ret));
    }
    if (st.counter >= 0) {
      // One more round of a counted repetition: back to its start, or out
      // through its written-out copies once the bound is reached.
      const CounterEdge& c = a_.counters[st.counter];
      if (!track_counts_)
        work_.push_back(arena_.intern(c.loop_target, n.parent, 0, n.unique));
      else if (n.count + 1 < c.rounds)
        work_.push_back(arena_.intern(c.loop_target, n.parent, n.count + 1, n.unique));
      else
        work_.push_back(arena_.intern(c.exit_target, n.parent, 0, n.unique));
    }
    if (st.accepting) {
      if (n.parent == kRootEnd) {
        out.completed = true;
      } else if (n.parent == kContext) {
        out.escaped = true;
      } else if (a_.has_unique_items && arena_.node(n.parent).unique < 0) {
        const int32_t next = item_ended(arena_.node(n.parent), out);  // (a copy: interning may move nodes)
        if (next >= 0) work_.push_back(next);
      } else {
        work_.push_back(n.parent);
      }
    }
  }
}

int32_t PdaWalker::item_ended(StackNode into, Frontier& out) {
  if (items_ == nullptr) {
    out.item_end = true;
    return -1;
  }
  const int32_t seen = items_->item_ends(into.unique);
  return seen < 0 ? -1 : arena_.intern(into.state, into.parent, into.count, seen);
}

void PdaWalker::closure_of(int32_t node, Frontier& out) {
  begin_generation();
  out.clear();
  visit(node, out);
}

void PdaWalker::advance(const Frontier& in, uint8_t byte, Frontier& out) {
  begin_generation();
  out.clear();
  for (int32_t id : in.nodes) {
    const StackNode n = arena_.node(id);
    const AutomatonState& st = a_.states[n.state];
    if (byte < st.first_byte_lo || byte > st.first_byte_hi) continue;
    for (uint32_t i = st.byte_begin; i < st.byte_end; ++i) {
      const ByteEdge& e = a_.byte_edges[i];
      if (byte >= e.lo && byte <= e.hi) visit(moved(n, e.target), out);
    }
  }
}

void PdaWalker::next_bytes(const Frontier& f, uint64_t bits[4]) const {
  bits[0] = bits[1] = bits[2] = bits[3] = 0;
  for (int32_t id : f.nodes) {
    const AutomatonState& st = a_.states[arena_.node(id).state];
    for (uint32_t i = st.byte_begin; i < st.byte_end; ++i)
      for (int b = a_.byte_edges[i].lo; b <= a_.byte_edges[i].hi; ++b) bits[b >> 6] |= 1ull << (b & 63);
  }
}

}  // namespace brioche::grammar
