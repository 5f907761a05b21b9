// Keys of what a walk of up to two bytes from an automaton state meets, so
// that the mask compiler decides once whether such walks are small
// (MaskBuilder::walk_is_small) for all states that agree on them. The
// inlined copies of a large array's items or an object's members (thousands
// of states that call rules, each returning into its own copy) differ
// further on, but not in their next two bytes; deciding each by walking the
// DFA was a quarter of the largest compiles.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "grammar/automaton.h"

namespace brioche::grammar {

class ShortWalkKeys {
 public:
  using Key = Automaton::StructureHash;
  // `rule_hashes`: Automaton::rule_structure_hashes(); `reading`:
  // Automaton::rules_reading_before_return(); `fallback(s)`: a key equal
  // only for states whose walks are alike for any number of bytes (the mask
  // compiler's own key), used where epsilon moves (calls of rules that may
  // return without reading, counter edges) form a cycle.
  ShortWalkKeys(const Automaton& a, const std::vector<Key>& rule_hashes, const std::vector<char>& reading,
                std::function<Key(int32_t)> fallback);

  // Equal keys: the stacks [s | unknown caller] and [t | unknown caller]
  // have the same closure's readable bytes and the same closures after
  // each first byte (their readable bytes, whether they return into the
  // caller, whether they die), up to structure. Computed on first need.
  Key two_bytes(int32_t state) { return key(1, state); }
  // Frees the tables (the compile is over).
  void release();

 private:
  // level 0: the closure (what it reads, whether it returns into the caller);
  // level 1: that, and level 0 of every configuration one byte on.
  Key key(int level, int32_t state);
  template <class Visit>
  void for_each_dependency(int level, int32_t state, const Visit& visit) const;
  Key local_hash(int level, int32_t state, bool* cycle);

  const Automaton& a_;
  const std::vector<Key>& rule_hashes_;
  const std::vector<char>& reading_;
  std::function<Key(int32_t)> fallback_;
  std::vector<Key> keys_[2];          // per level and state; {0, 0}: not computed
  std::vector<uint8_t> progress_[2];  // 0 not started, 1 on the DFS path, 2 done
  std::vector<std::pair<int, int32_t>> stack_;
};

}  // namespace brioche::grammar
