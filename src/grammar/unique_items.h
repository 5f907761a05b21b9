// The values of uniqueItems arrays, for one matcher (pda.h's StackNode::
// unique refers here). A grammar cannot say "all items differ" over
// unbounded items, so the matcher checks it: a call of an item rule
// (Automaton::rule_unique_item) records where the item starts, and
// returning from it compares the item's text, as a JSON value
// (json_canonical.h), with the values the same array took before; a repeat
// ends that stack. Both kinds of record are interned, so equal stacks keep
// equal node ids, and are only appended: a rollback or the end of a mask
// computation drops what was added since a mark.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace brioche::grammar {

class UniqueItems {
 public:
  UniqueItems();

  // The text the walker reads: byte `pos` of the output, written before it
  // is advanced (a walk may go back and read other bytes from an earlier
  // position: a mask computation tries many tokens).
  void put(int32_t pos, uint8_t byte) {
    text_.resize(static_cast<size_t>(pos));
    text_.push_back(static_cast<char>(byte));
  }
  int32_t text_size() const { return static_cast<int32_t>(text_.size()); }
  std::string_view text() const { return text_; }

  // An item rule is called from a frame whose values so far are `seen`
  // (0: none): the record (< 0) of an item starting after the text so far.
  int32_t item_starts(int32_t seen);
  // The item `in_progress` ends after the text so far: the values with it
  // added (> 0), or -1 when it equals one of them.
  int32_t item_ends(int32_t in_progress);

  // Of an item in progress: where its text starts, and the kinds of the
  // values before it (bits of kind_bit: what a token ending it must repeat).
  int32_t start_of(int32_t in_progress) const { return pending_[pending_index(in_progress)].start; }
  uint32_t seen_kinds(int32_t in_progress) const { return sets_[pending_[pending_index(in_progress)].seen].kinds; }
  // Whether the item `in_progress`, continued by `rest` after the text so
  // far, is one JSON value equal to a value before it.
  bool repeats(int32_t in_progress, std::string_view rest);
  // A JSON value's kind bit from the first byte of its text (0: none).
  static uint32_t kind_bit(char first_byte);

  struct Mark {
    size_t sets, pending, text;
  };
  Mark mark() const { return {sets_.size(), pending_.size(), text_.size()}; }
  void rollback(const Mark& m);
  void reset();

 private:
  struct ValueSet {     // the values of one array so far: `value` added to `prev`
    int32_t prev;       // 0: the empty set
    std::string value;  // canonical form; empty for the empty set
    uint64_t hash;      // of value
    uint32_t kinds;     // kind bits of every value in the chain
  };
  struct Pending {
    int32_t seen;   // a ValueSet id
    int32_t start;  // text position of the item's first byte
  };
  static size_t pending_index(int32_t id) { return static_cast<size_t>(-id - 2); }
  bool contains(int32_t set, const std::string& value, uint64_t hash) const;
  // The canonical form of text_[start, end) + rest into canonical_; false
  // when that is not one JSON value. The last text is remembered.
  bool canonical(int32_t start, std::string_view rest);

  std::string text_;
  std::vector<ValueSet> sets_;  // [0] is the empty set
  std::vector<Pending> pending_;
  std::unordered_map<std::string, int32_t> set_ids_;   // key: prev + value
  std::unordered_map<uint64_t, int32_t> pending_ids_;  // key: (seen, start)
  std::string raw_, last_raw_, canonical_, last_canonical_;
  bool last_ok_ = false;
};

}  // namespace brioche::grammar
