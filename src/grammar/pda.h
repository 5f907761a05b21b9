// Runtime of the byte-level pushdown automaton: persistent stacks and the
// closure / advance steps shared by the matcher and the mask compiler.
//
// A stack is a node (automaton state, parent node); parent chains are
// shared and hash-consed, so a set of stacks is a set of node ids, equal
// stacks have equal ids, and a past set stays valid (rollback is keeping
// the old id list). Nodes created after a checkpoint can be dropped again.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/automaton.h"

namespace brioche::grammar {

struct StackNode {
  int32_t state;
  int32_t parent;  // node id, or kRootEnd / kContext
};

inline constexpr int32_t kRootEnd = -1;  // popping here completes the grammar
inline constexpr int32_t kContext = -2;  // unknown caller: mask precompute of one rule state

class StackArena {
 public:
  StackArena();
  int32_t intern(int32_t state, int32_t parent);
  const StackNode& node(int32_t id) const { return nodes_[id]; }
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  size_t memory_bytes() const { return nodes_.capacity() * sizeof(StackNode) + table_.capacity() * sizeof(int32_t); }
  // Drops every node with id >= n (nodes are only referenced by later ones).
  void truncate(int32_t n);

 private:
  static uint64_t key(int32_t state, int32_t parent) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(parent);
  }
  static uint64_t slot_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
  }
  void grow();
  void erase_key(uint64_t k);

  std::vector<StackNode> nodes_;
  std::vector<int32_t> table_;  // open addressing, linear probing; -1 = empty
  uint64_t mask_ = 0;
};

// A set of stacks after reading some bytes: the nodes that can read a byte
// next, and whether some stack completed the grammar (kRootEnd) or, in the
// precompute, returned into the unknown caller (kContext).
struct Frontier {
  std::vector<int32_t> nodes;
  bool completed = false;
  bool escaped = false;
  void clear() {
    nodes.clear();
    completed = escaped = false;
  }
  bool alive() const { return !nodes.empty() || completed || escaped; }
};

class PdaWalker {
 public:
  PdaWalker(const Automaton& automaton, StackArena& arena) : a_(automaton), arena_(arena) {}

  // Closure of a single stack (pushes callees, pops finished rules).
  void closure_of(int32_t node, Frontier& out);
  // Reads `byte` from every stack in `in`; the closure of the results goes to out.
  void advance(const Frontier& in, uint8_t byte, Frontier& out);
  // The union of bytes some stack in `f` can read next (bit b of 256).
  void next_bytes(const Frontier& f, uint64_t bits[4]) const;

 private:
  void begin_generation();
  void visit(int32_t node, Frontier& out);

  const Automaton& a_;
  StackArena& arena_;
  std::vector<uint32_t> stamp_;
  uint32_t generation_ = 0;
  std::vector<int32_t> work_;
};

}  // namespace brioche::grammar
