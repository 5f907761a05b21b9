// Byte-level pushdown automaton lowered from the grammar IR.
//
// Each rule becomes an epsilon-free NFA over bytes whose edges either read a
// byte range or call another rule (push; return to the edge's target when
// the callee reaches an accepting state). Character classes are expanded to
// UTF-8 byte sequences over codepoints 0..0x10FFFF (surrogates included,
// overlong forms excluded), so tokens that split a character mid-sequence
// are handled exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace brioche::grammar {

struct ByteEdge {
  uint8_t lo, hi;  // inclusive byte range
  int32_t target;  // global state id
};

struct RuleEdge {
  int32_t rule;    // callee
  int32_t target;  // state to continue at after the callee completes
};

// A counted repetition (x{m,n} with large m or n - m) is not unrolled: its
// body is built once, and the state that ends a round of it carries a
// counter edge, an epsilon move taken at run time: with `count + 1 < rounds`
// back to the body's start (`loop_target`, count + 1), else on to
// `exit_target` (count 0), where `window` written-out copies of the body
// follow (at least as many as the longest token has bytes, so that no
// token's mask depends on the count: see PdaWalker::Counts).
struct CounterEdge {
  int32_t loop_target;  // global state id
  int32_t exit_target;  // global state id
  int32_t rounds;       // rounds of the body before the exit
};

struct AutomatonState {
  int32_t rule = -1;
  int32_t counter = -1;                   // into Automaton::counters: a round ends here; -1: none
  uint32_t byte_begin = 0, byte_end = 0;  // into Automaton::byte_edges
  uint32_t rule_begin = 0, rule_end = 0;  // into Automaton::rule_edges
  // The counted repetition (its index among its rule's) whose body holds
  // this state, or -1. Within one a stack node keeps its count.
  int16_t loop = -1;
  bool accepting = false;
  uint8_t first_byte_lo = 255, first_byte_hi = 0;  // bounds of all byte edges (fast reject)
  // Accepting with no edge: a rule that reaches it returns at once. A call
  // that continues here is a tail call (PdaWalker).
  bool only_returns() const { return accepting && byte_begin == byte_end && rule_begin == rule_end && counter < 0; }
};

struct AutomatonLimits {
  size_t max_states = 2'000'000;  // size budget; exceeding it fails the build
  // Rules up to this size (expression nodes, repetitions expanded) with no
  // recursion and no lookahead are inlined into their callers: fewer rule
  // boundaries means fewer tokens whose mask depends on the caller.
  int64_t inline_limit = 512;
  // Work budget of the build (see CompileLimits::max_work; compile() passes
  // its own): NFA states made, epsilon-closure steps, state comparisons of
  // the merge. Counted, so the answer does not depend on the machine.
  uint64_t max_work = UINT64_MAX;
  // Counted repetitions (CounterEdge): a repetition whose required or
  // optional part has more than max(2 * counter_window, counter_from)
  // copies counts them instead of unrolling, keeping `counter_window`
  // written-out copies next to the bound. CompiledGrammar::compile sets the
  // window to the vocabulary's longest token (its masks are exact with
  // it); 0 unrolls every repetition.
  int32_t counter_window = 0;
  int64_t counter_from = 0;
};

class Automaton {
 public:
  static Automaton build(const Grammar& grammar, const AutomatonLimits& limits = {});

  std::vector<AutomatonState> states;
  std::vector<ByteEdge> byte_edges;
  std::vector<RuleEdge> rule_edges;
  std::vector<CounterEdge> counters;
  // Per rule: its start state, or -1 when the rule was inlined into its
  // callers (small, non-recursive) or is unreachable. Rules past the
  // grammar's own are lookahead assertions of rule_lookahead.
  std::vector<int32_t> rule_start;
  std::vector<std::string> rule_names;
  std::vector<int32_t> rule_lookahead;  // per rule: its lookahead rule, or -1
  // Per rule: a uniqueItems item (Rule::unique_item). A call of one returns
  // into a node that records where the item started (StackNode::unique);
  // returning there compares the item with the earlier ones (pda.h).
  std::vector<char> rule_unique_item;
  bool has_unique_items = false;
  // Rules [first_lookahead_rule, first_item_rule) are lookahead
  // assertions; rules from first_item_rule on read one item of a length
  // bound (a large class, or a JSON character with its escapes): the
  // bound's layers call it instead of each holding its states.
  int32_t first_lookahead_rule = 0;
  int32_t first_item_rule = 0;
  bool is_lookahead_rule(int32_t r) const { return r >= first_lookahead_rule && r < first_item_rule; }

  // Per rule, a 128-bit hash of everything its token masks depend on: its
  // states relative to its start, its lookahead, and (recursively) the
  // rules it calls. Equal hashes (with the same vocabulary) mean equal masks
  // state by state, in any grammar; mutually recursive rules are hashed as
  // one group. {0, 0} for rules that were inlined or are unreachable.
  struct StructureHash {
    uint64_t a = 0, b = 0;
    bool operator==(const StructureHash&) const = default;
  };
  std::vector<StructureHash> rule_structure_hashes() const;
  // Per state, a 128-bit hash of everything a walk of up to `bytes` bytes
  // from it depends on (with an unknown caller below its rule): what it
  // reads, the calls it makes (by the callee's structure hash, `rule_hashes`
  // from rule_structure_hashes()), where it may return and the lookahead
  // then checked, and the same of every state such a walk reaches. Equal
  // hashes mean equal token masks for tokens of up to `bytes` bytes, in any
  // rule of any grammar: the copy with r characters left of a string of
  // maxLength 64 and one of maxLength 100 are alike. {0, 0} where it is not
  // computed (not wanted; lookahead rules; rules whose calls or counters
  // form a cycle without a byte read).
  // Only rules with `wanted[r]` are computed (it costs up to `bytes` rounds
  // over a rule's states).
  std::vector<StructureHash> forward_hashes(int32_t bytes, const std::vector<StructureHash>& rule_hashes,
                                            const std::vector<char>& wanted) const;
  // Number of states of rule r (they are contiguous from rule_start[r]).
  int32_t rule_size(int32_t r) const;
  // Per state, the offset in its rule of the first state of that rule that
  // reads every byte string of up to `max_bytes` bytes the same way: the
  // same edges taken, the same accepting states and calls reached. Token
  // masks depend only on walks of at most the longest token, so such
  // states share one mask: an unrolled bounded repetition (`c{0,4096}`)
  // has thousands of copies of the same states, of which only the last
  // `max_bytes` differ. Rules under `min_states` states keep their own
  // offsets (nothing to gain).
  //
  // `prefix_twin` (optional), per state: the offset of an earlier state of
  // its rule that reads every byte string of up to `prefix_twin_bytes[s]`
  // bytes the same way (the last refinement round in which they shared a
  // class), or -1. Tokens that short are classified alike from both, so
  // the compiler takes them from the twin's mask and walks only the longer
  // ones: the copies of an unrolled repetition near its bound differ from
  // the far copies only in tokens longer than what is left of the bound.
  std::vector<int32_t> walk_class_offsets(int32_t max_bytes, int32_t min_states,
                                          std::vector<int32_t>* prefix_twin = nullptr,
                                          std::vector<int32_t>* prefix_twin_bytes = nullptr) const;
  // Per rule: 1 when every way through it reads at least one byte before
  // it returns (no accepting state reachable from its start by calls and
  // counter edges alone): an item rule, an object, a quoted string; 0 for
  // rules that may match the empty string, inlined or unreachable ones.
  std::vector<char> rules_reading_before_return() const;
  int32_t root_rule = 0;
  uint64_t build_work = 0;  // work units the build spent (AutomatonLimits::max_work)

  bool has_byte_edges(int32_t s) const { return states[s].byte_begin != states[s].byte_end; }
};

}  // namespace brioche::grammar
