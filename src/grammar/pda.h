// Runtime of the byte-level pushdown automaton: persistent stacks and the
// closure / advance steps shared by the matcher and the mask compiler.
//
// A stack is a node (automaton state, parent node); parent chains are
// shared and hash-consed, so a set of stacks is a set of node ids, equal
// stacks have equal ids, and a past set stays valid (rollback is keeping
// the old id list). Nodes created after a checkpoint can be dropped again.
//
// A node also carries a count: how many times the counted repetition its
// state belongs to (Automaton::counters) has gone round so far. States of
// no counted repetition always have count 0.
//
// And, for uniqueItems (Automaton::rule_unique_item), `unique`: on the frame
// of a rule that calls item rules, the values its earlier items took (an id
// of UniqueItems; 0: none yet); on the node a call of an item rule returns
// to, the item in progress (negative). Returning into such a node ends the
// item: the matcher's UniqueItems compares it with the earlier ones and the
// stack goes on only if it is new. The mask compiler, which has no values,
// stops the stack there and flags the configuration (Frontier::item_end):
// a token that ends an item is checked at run time (state_walk.h).
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/automaton.h"

namespace brioche::grammar {

struct StackNode {
  int32_t state;
  int32_t parent;  // node id, or kRootEnd / kContext
  int32_t count;   // rounds of the counted repetition `state` is in (0 outside one)
  int32_t unique;  // uniqueItems: values seen (> 0), an item in progress (< 0), or 0
};

inline constexpr int32_t kRootEnd = -1;  // popping here completes the grammar
inline constexpr int32_t kContext = -2;  // unknown caller: mask precompute of one rule state
// StackNode::unique of an item in progress in the mask compiler (no values).
inline constexpr int32_t kItemInProgress = -1;

class UniqueItems;

class StackArena {
 public:
  StackArena();
  int32_t intern(int32_t state, int32_t parent, int32_t count = 0, int32_t unique = 0);
  const StackNode& node(int32_t id) const { return nodes_[id]; }
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  size_t memory_bytes() const { return nodes_.capacity() * sizeof(StackNode) + table_.capacity() * sizeof(int32_t); }
  // Drops every node with id >= n (nodes are only referenced by later ones).
  void truncate(int32_t n);

 private:
  static uint64_t slot_hash(int32_t state, int32_t parent, int32_t count, int32_t unique) {
    uint64_t k = (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(parent);
    k ^= static_cast<uint64_t>(static_cast<uint32_t>(count)) * 0x9e3779b97f4a7c15ull;
    k ^= static_cast<uint64_t>(static_cast<uint32_t>(unique)) * 0xc2b2ae3d27d4eb4full;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
  }
  static uint64_t slot_hash(const StackNode& n) { return slot_hash(n.state, n.parent, n.count, n.unique); }
  void grow();
  void erase_node(int32_t id);

  std::vector<StackNode> nodes_;
  std::vector<int32_t> table_;  // open addressing, linear probing; -1 = empty
  uint64_t mask_ = 0;
};

// A set of stacks after reading some bytes: the nodes that can read a byte
// next, and whether some stack completed the grammar (kRootEnd) or, in the
// precompute, returned into the unknown caller (kContext) or ended a
// uniqueItems item (the run-time check decides whether it goes on).
struct Frontier {
  std::vector<int32_t> nodes;
  bool completed = false;
  bool escaped = false;
  bool item_end = false;
  void clear() {
    nodes.clear();
    completed = escaped = item_end = false;
  }
  bool alive() const { return !nodes.empty() || completed || escaped; }
};

class PdaWalker {
 public:
  // What a counted repetition does at run time. kTrack (the matcher):
  // counts rounds and leaves the repetition at its bound. kIgnore (the mask
  // compiler): every round goes back to the repetition's start, as if it
  // never ended; exact for masks because each counted repetition is
  // followed by written-out copies of its body at least as many as the
  // longest token has bytes (Automaton::counters).
  enum class Counts { kTrack, kIgnore };
  PdaWalker(const Automaton& automaton, StackArena& arena, Counts counts = Counts::kTrack)
      : a_(automaton), arena_(arena), track_counts_(counts == Counts::kTrack) {}
  // The matcher's values of uniqueItems arrays (null: the mask compiler,
  // which stops a stack where an item ends and sets Frontier::item_end).
  void set_unique_items(UniqueItems* items) { items_ = items; }

  // Closure of a single stack (pushes callees, pops finished rules).
  void closure_of(int32_t node, Frontier& out);
  // Reads `byte` from every stack in `in`; the closure of the results goes to out.
  void advance(const Frontier& in, uint8_t byte, Frontier& out);
  // The union of bytes some stack in `f` can read next (bit b of 256).
  void next_bytes(const Frontier& f, uint64_t bits[4]) const;

 private:
  void begin_generation();
  void visit(int32_t node, Frontier& out);
  // The node for `target` after `from`'s state moved there inside one rule:
  // the count is kept within one counted repetition, else it is 0.
  // The frame's uniqueItems values go along (`unique`: the same frame).
  int32_t moved(const StackNode& from, int32_t target, int32_t unique) {
    if (from.count == 0) return arena_.intern(target, from.parent, 0, unique);  // outside every count
    const int32_t loop = a_.states[target].loop;
    const bool keep = loop >= 0 && loop == a_.states[from.state].loop;
    return arena_.intern(target, from.parent, keep ? from.count : 0, unique);
  }
  int32_t moved(const StackNode& from, int32_t target) { return moved(from, target, from.unique); }
  // Returning from an item rule into `into` (an item in progress): the
  // caller's frame with the item added to its values, or -1 when it
  // repeats one (mask compiler: -1 and Frontier::item_end set).
  int32_t item_ended(StackNode into, Frontier& out);

  const Automaton& a_;
  StackArena& arena_;
  bool track_counts_;
  UniqueItems* items_ = nullptr;
  std::vector<uint32_t> stamp_;
  uint32_t generation_ = 0;
  std::vector<int32_t> work_;
};

}  // namespace brioche::grammar
