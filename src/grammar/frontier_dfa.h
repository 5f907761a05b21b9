// A lazily determinised view of the pushdown automaton for the mask
// compiler. A configuration is a set of stacks (a Frontier: stack-node ids
// of one shared arena, plus whether some stack returned into the unknown
// caller); configurations are interned, and the transition of a
// configuration on a byte is computed once and then read from a table.
// Walking the vocabulary trie from many start states is then one table
// lookup per trie node instead of a pushdown closure per byte.
//
// Byte classes: bytes that every byte edge of the automaton treats alike
// (the same ranges contain them) share a table column.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/pda.h"

namespace brioche::grammar {

class FrontierDfa {
 public:
  // At most max_configs configurations, and at most max_table_bytes of
  // transition rows as if every configuration had one (configurations x
  // byte classes x 4): past either the compile fails (a size budget)
  // instead of taking the machine's memory.
  explicit FrontierDfa(const Automaton& automaton, size_t max_configs = 4'000'000,
                       size_t max_table_bytes = 256ull << 20);

  // Configuration of the stacks closure(state) over an unknown caller.
  int32_t start(int32_t state);
  // Configuration after reading `byte` from configuration c.
  int32_t next(int32_t c, uint8_t byte) {
    int32_t* row = rows_[c];
    if (row == nullptr) row = add_row(c);
    const int32_t cls = class_of_[byte];
    if (row[cls] < 0) row[cls] = compute(c, byte);  // may intern configurations (rows stay where they are)
    return row[cls];
  }
  // No stack can read another byte (the walk ends here).
  bool dead(int32_t c) const { return (flags_[c] & kDead) != 0; }
  // Some stack returned into the caller on the last byte.
  bool escaped(int32_t c) const { return (flags_[c] & kEscaped) != 0; }
  // Some stack ended a uniqueItems item on the last byte (Frontier::item_end).
  bool item_end(int32_t c) const { return (flags_[c] & kItemEnd) != 0; }
  // All in one load: kDead | kEscaped | kItemEnd bits.
  static constexpr uint8_t kDead = 1, kEscaped = 2, kItemEnd = 4;
  uint8_t flags(int32_t c) const { return flags_[c]; }
  // How many distinct bytes some stack of c has an edge for.
  int32_t num_readable(int32_t c) const { return num_readable_[c]; }
  int32_t num_configs() const { return static_cast<int32_t>(flags_.size()); }
  // Stacks in configuration c (what a transition from it costs to compute).
  int32_t num_nodes(int32_t c) const { return node_begin_[c + 1] - node_begin_[c]; }
  // The stacks of configuration c: sorted node ids of arena().
  std::span<const int32_t> stacks(int32_t c) const {
    return {nodes_.data() + node_begin_[c], static_cast<size_t>(node_begin_[c + 1] - node_begin_[c])};
  }
  const StackArena& arena() const { return arena_; }
  // Bytes held (tables, interned keys, the stack arena), an estimate.
  size_t memory_bytes() const;
  // Whether next(c, b) == c for every byte b of `bytes` in its words
  // [word_begin, word_end) (a 256-bit set, [4] words): a token suffix made
  // only of such bytes leaves c unchanged (so alive, if c is; a dead c
  // loops on nothing). Decided byte by byte on first need and remembered,
  // stopping at the first byte that leaves c: most configurations loop on
  // nothing, and computing all their transitions (a closure each) would
  // cost more than the walks that ask.
  bool loops_on(int32_t c, const uint64_t* bytes, int word_begin, int word_end) {
    for (int w = word_begin; w < word_end; ++w)
      if ((bytes[w] & ~self_loop_[c][w]) != 0) return decide_loops(c, bytes, word_begin, word_end);
    return true;
  }
  // Every well-formed UTF-8 character from U+0080 up (surrogates included)
  // read from c comes back to c, with every configuration on the way alive
  // (a string body that takes any character). Computed on first use.
  bool loops_on_utf8(int32_t c);
  // The bytes some stack of c has an edge for, ascending (every other byte
  // leads to the dead configuration without an escape).
  std::string_view readable_bytes(int32_t c) {
    if (readable_begin_[c] < 0) compute_readable(c);
    return std::string_view(readable_pool_).substr(readable_begin_[c], readable_size_[c]);
  }

 private:
  int32_t compute(int32_t c, uint8_t byte);
  int32_t* add_row(int32_t c);
  int32_t intern(Frontier& f);
  void compute_readable(int32_t c);
  bool decide_loops(int32_t c, const uint64_t* bytes, int word_begin, int word_end);
  bool utf8_returns(int32_t home, int32_t c, int seq, int pos, std::vector<std::pair<int32_t, int>>& seen);

  const Automaton& a_;
  size_t max_configs_;
  StackArena arena_;
  PdaWalker walker_;
  uint8_t class_of_[256];
  int32_t num_classes_ = 0;
  // Transition rows, made on a configuration's first next(): most
  // configurations are only reached (a walk's last byte, a dead end) and
  // never left, and a row is num_classes_ entries (up to 1 KiB). Rows live
  // in blocks that never move, so a row pointer stays valid while compute()
  // interns more configurations.
  std::vector<int32_t*> rows_;                          // per configuration; nullptr = no row yet
  std::vector<std::unique_ptr<int32_t[]>> row_blocks_;  // kRowsPerBlock rows each, -1 = not computed yet
  int32_t rows_in_last_block_ = 0;
  static constexpr int32_t kRowsPerBlock = 256;
  std::vector<int32_t> node_begin_;                      // [num_configs + 1] into nodes_
  std::vector<int32_t> nodes_;                           // sorted stack-node ids per configuration
  std::vector<uint8_t> flags_;                           // per configuration: kDead | kEscaped | kItemEnd
  std::vector<int32_t> num_readable_;                    // per configuration
  std::vector<int32_t> readable_begin_, readable_size_;  // per configuration, into readable_pool_; -1 = not yet
  std::string readable_pool_;
  // Per configuration, bytes known to loop (next(c, b) == c) and bytes
  // known not to (loops_on decides them on first need).
  std::vector<std::array<uint64_t, 4>> self_loop_, not_self_loop_;
  std::vector<int8_t> utf8_loop_;  // per configuration: -1 not yet, 0/1
  // Interned configurations: open addressing with linear probing over
  // config ids (-1 empty), keyed by the hash of (sorted stacks, escaped, item_end);
  // a probe compares against nodes_ in place, so no key is copied.
  std::vector<int32_t> slots_;
  std::vector<uint64_t> config_hash_;  // per configuration
  Frontier scratch_in_, scratch_out_;
};

}  // namespace brioche::grammar
