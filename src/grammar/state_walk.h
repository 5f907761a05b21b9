// One state's token classification: a depth-first walk of the vocabulary
// trie through the lazily determinised stacks (FrontierDfa). Used by the
// mask compiler (compiler.cpp) only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/frontier_dfa.h"
#include "grammar/vocabulary.h"

namespace brioche::grammar {

// Tokens a walk leaves out (not classified): the caller has them from a
// state that walks them alike (MaskBuilder::derive, derive_first_bytes).
struct WalkSkip {
  int32_t longer_than = 0;                // tokens of at most this many bytes
  const uint64_t* first_bytes = nullptr;  // [4]: tokens whose first byte is in this set
};

// Walks the vocabulary trie from one state with an unknown caller below it.
// After k bytes the stacks are F[k]; E[k] says some stack returned into the
// caller there, I[k] that some stack ended a uniqueItems item there (it may
// go on only if the item is new: the matcher decides). A token of length L is
//   accepted  if F[L] is non-empty or E[L] (the rule ended exactly at its end),
//   uncertain if not accepted and E[j] for some 1 <= j < L, or I[j] for some
//             1 <= j <= L,
//   rejected  otherwise.
// Returning at j = 0 is ignored: the matcher's closure already contains the
// caller's own stacks. F[k] are configurations of a lazily built DFA shared
// by every state of the compile, so each trie node costs one table lookup.
class StatePrecompute {
 public:
  StatePrecompute(const Automaton& a, const Vocabulary& v, FrontierDfa& dfa) : a_(a), v_(v), dfa_(dfa) {
    const size_t depth = static_cast<size_t>(v_.max_token_length()) + 1;
    config_.resize(depth);
    escape_.resize(depth);
    any_escape_.resize(depth);
    any_item_end_.resize(depth);
    cursor_.resize(depth);
    cursor_end_.resize(depth);
    by_byte_.resize(depth);
    byte_cursor_.resize(depth);
    byte_end_.resize(depth);
    byte_buffer_.resize(32 * depth);
  }

  // Appends accepted and uncertain token ids, in rank order, except the
  // tokens `skip` names.
  void run(int32_t state, std::vector<int32_t>& accepted, std::vector<int32_t>& uncertain_ranks, WalkSkip skip = {}) {
    const int32_t longer_than = skip.longer_than;
    const uint64_t* skip_first = skip.first_bytes;
    const auto& longest_below = v_.trie_longest_below();
    auto long_enough = [&](int32_t rank) {
      return longer_than == 0 || static_cast<int32_t>(v_.ranked(rank).size()) > longer_than;
    };
    const auto& nodes = v_.trie_nodes();
    const auto& edges = v_.trie_edges();
    const auto& sorted = v_.sorted_ids();
    const auto& bytes_below = v_.trie_bytes_below();
    const auto& utf8_below = v_.trie_utf8_below();
    lookahead_ = a_.rule_lookahead[a_.states[state].rule];
    lookahead_start_ = lookahead_ >= 0 ? dfa_.start(a_.rule_start[lookahead_]) : -1;
    config_[0] = dfa_.start(state);
    escape_[0] = any_escape_[0] = any_item_end_[0] = 0;
    // Depth-first over the trie. At depth d the children to try are either
    // all of the node's edges (edges[cursor_[d]..cursor_end_[d]) or, when
    // the configuration reads few bytes and no escape happened on the path,
    // only the children for those bytes (found by binary search).
    int32_t d = 0;
    enter(0, 0);
    while (d >= 0) {
      int32_t edge_index;
      if (by_byte_[d]) {
        if (byte_cursor_[d] == byte_end_[d]) {
          --d;
          continue;
        }
        const uint8_t b = byte_buffer_[byte_cursor_[d]++];
        const Vocabulary::TrieEdge* lo = edges.data() + cursor_[d];
        const Vocabulary::TrieEdge* hi = edges.data() + cursor_end_[d];
        const Vocabulary::TrieEdge* it =
            std::lower_bound(lo, hi, b, [](const Vocabulary::TrieEdge& e, uint8_t x) { return e.byte < x; });
        if (it == hi || it->byte != b) continue;
        cursor_[d] = static_cast<int32_t>(it - edges.data()) + 1;  // later bytes are larger
        edge_index = static_cast<int32_t>(it - edges.data());
      } else {
        if (cursor_[d] == cursor_end_[d]) {
          --d;
          continue;
        }
        edge_index = cursor_[d]++;
      }
      const Vocabulary::TrieEdge edge = edges[edge_index];
      if (longest_below[edge.node] <= longer_than) continue;  // every token below is the caller's
      if (d == 0 && skip_first != nullptr && (skip_first[edge.byte >> 6] >> (edge.byte & 63) & 1)) continue;
      const int32_t c = dfa_.next(config_[d], edge.byte);
      work_ += 1 + static_cast<uint64_t>(dfa_.num_nodes(c));
      const uint8_t flags = dfa_.flags(c);
      const uint8_t esc = (flags & FrontierDfa::kEscaped) ? 1 : 0;
      const uint8_t any_esc = any_escape_[d] | esc;
      const uint8_t any_item_end = any_item_end_[d] | ((flags & FrontierDfa::kItemEnd) ? 1 : 0);
      const int32_t k = d + 1;
      if (!(flags & FrontierDfa::kDead)) {
        const Vocabulary::TrieNode& node = nodes[edge.node];
        if (k > longer_than) {
          if (node.num_exact == 1)
            accepted.push_back(sorted[node.rank_begin]);
          else
            for (int32_t r = node.rank_begin; r < node.rank_begin + node.num_exact; ++r) accepted.push_back(sorted[r]);
        }
        // Every byte below loops on c (e.g. plain ASCII inside a JSON
        // string): the whole subtree stays alive, so all of it is accepted
        // without reading it. Most of a wide state's walk ends here.
        if (node.rank_end - node.rank_begin - node.num_exact >= kMinBulkTokens &&
            covered(bytes_below[edge.node], utf8_below[edge.node], c)) {
          work_ += static_cast<uint64_t>(node.rank_end - node.rank_begin - node.num_exact);
          for (int32_t r = node.rank_begin + node.num_exact; r < node.rank_end; ++r)
            if (long_enough(r)) accepted.push_back(sorted[r]);
          continue;
        }
        config_[k] = c;
        escape_[k] = esc;
        any_escape_[k] = any_esc;
        any_item_end_[k] = any_item_end;
        enter(k, edge.node);
        d = k;
        continue;
      }
      // nothing below returns to the caller or ends an item: all rejected
      if (!any_esc && !any_item_end) continue;
      // Dead after k bytes: this node's tokens and its whole subtree are
      // decided by escape_ / any_escape_ / any_item_end alone.
      escape_[k] = esc;
      any_escape_[k] = any_esc;
      any_item_end_[k] = any_item_end;
      const Vocabulary::TrieNode& node = nodes[edge.node];
      const int32_t exact_end = node.rank_begin + node.num_exact;
      for (int32_t r = node.rank_begin; r < exact_end && k > longer_than; ++r) {
        if (esc)
          accepted.push_back(sorted[r]);
        else if (any_item_end || returns_to_caller(r, k - 1))
          uncertain_ranks.push_back(r);
      }
      for (int32_t r = exact_end; r < node.rank_end; ++r)
        if (long_enough(r) && (any_item_end || returns_to_caller(r, k))) uncertain_ranks.push_back(r);
    }
  }

 public:
  // Work units spent so far (CompileLimits::max_work): one per trie edge
  // walked plus the stacks of the configuration it reaches, one per token
  // accepted in bulk, one per token checked against the caller and per
  // byte of its lookahead check. All of it depends only on the state's
  // rule structure and the vocabulary.
  uint64_t work() const { return work_; }

 private:
  uint64_t work_ = 0;
  // Checked even for one token below: long single-token chains (the tail of
  // "internationalization") would otherwise be read byte by byte.
  static constexpr int32_t kMinBulkTokens = 1;
  // Every token below stays alive in c: its ASCII bytes loop on c, and its
  // other bytes (if any) form whole characters that c loops on.
  bool covered(const Vocabulary::ByteSet& below, uint8_t utf8_below, int32_t c) {
    if (!dfa_.loops_on(c, below.data(), 0, 2)) return false;
    if ((below[2] | below[3]) == 0 || dfa_.loops_on(c, below.data(), 2, 4)) return true;
    return utf8_below && dfa_.loops_on_utf8(c);
  }

  // Sets up the child iteration of trie node `node` at depth d (config_[d] set).
  void enter(int32_t d, int32_t node) {
    const Vocabulary::TrieNode& n = v_.trie_nodes()[node];
    cursor_[d] = n.kid_begin;
    cursor_end_[d] = n.kid_end;
    by_byte_[d] = 0;
    if (any_escape_[d] || any_item_end_[d]) return;  // dead children may still hold uncertain tokens
    const int32_t kids = n.kid_end - n.kid_begin;
    // Binary searches cost ~log2(kids) each; a scan costs one lookup per kid.
    if (dfa_.num_readable(config_[d]) * 8 >= kids) return;
    std::string_view bytes = dfa_.readable_bytes(config_[d]);
    // (then bytes.size() < 32: kids <= 256)
    by_byte_[d] = 1;
    std::copy(bytes.begin(), bytes.end(), byte_buffer_.begin() + 32 * d);
    byte_cursor_[d] = 32 * d;
    byte_end_[d] = 32 * d + static_cast<int32_t>(bytes.size());
  }

  // Some stack returned into the caller after j bytes, 1 <= j <= upto, with
  // the rest of the token compatible with the rule's lookahead assertion
  // (a rule without one accepts any rest).
  bool returns_to_caller(int32_t rank, int32_t upto) {
    ++work_;
    if (!any_escape_[upto]) return false;
    if (lookahead_ < 0) return true;
    std::string_view tok = v_.ranked(rank);
    for (int32_t j = 1; j <= upto; ++j)
      if (escape_[j] && lookahead_allows(tok.substr(j))) return true;
    return false;
  }

  // Whether `rest` can start what the lookahead rule matches (or contains
  // a full match of it as a prefix).
  bool lookahead_allows(std::string_view rest) {
    int32_t c = lookahead_start_;
    if (dfa_.escaped(c)) return true;
    for (unsigned char b : rest) {
      ++work_;
      c = dfa_.next(c, b);
      if (dfa_.escaped(c)) return true;
      if (dfa_.dead(c)) return false;
    }
    return true;
  }

  const Automaton& a_;
  const Vocabulary& v_;
  FrontierDfa& dfa_;

  int32_t lookahead_ = -1, lookahead_start_ = -1;
  std::vector<int32_t> config_;  // [max token length + 1] configuration after d bytes
  std::vector<uint8_t> escape_, any_escape_, any_item_end_;
  std::vector<int32_t> cursor_, cursor_end_;  // per depth: next child edge, end of the child list
  // Per depth, when children are looked up by byte: the bytes to try,
  // byte_buffer_[byte_cursor_[d], byte_end_[d]) (32 slots per depth).
  std::vector<uint8_t> by_byte_;
  std::vector<int32_t> byte_cursor_, byte_end_;
  std::vector<uint8_t> byte_buffer_;
};

}  // namespace brioche::grammar
