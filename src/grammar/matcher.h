// Per-request grammar state: which bytes/tokens were accepted so far, the
// next-token mask, termination, rollback and jump-forward.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compiler.h"
#include "grammar/pda.h"
#include "grammar/unique_items.h"

namespace brioche::grammar {

struct MatcherOptions {
  // How many accepted tokens rollback() can undo; < 0: unlimited.
  int32_t max_rollback_tokens = -1;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> compiled, MatcherOptions options = {});

  // Advances by one token. Returns false (state unchanged) when the grammar
  // does not allow it. An EOS id is accepted exactly when can_terminate().
  bool accept_token(int32_t token_id);
  // Advances by raw bytes (counts as one step for rollback). All or nothing.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n accepted steps (tokens or byte strings).
  void rollback(int32_t n);
  void reset();

  // mask: [ceil(vocab_size / 32)] words; bit i of word w is token 32w+i.
  // Set = allowed. EOS ids are set exactly when the grammar can terminate.
  void fill_next_token_bitmask(uint32_t* mask);
  int32_t mask_words() const { return compiled_->vocabulary().num_words(); }

  // The grammar accepts the text so far as complete.
  bool can_terminate() const;
  // Finished: an EOS token was accepted, or the text is complete and the
  // grammar allows no further byte.
  bool is_terminated() const;
  // The longest string every continuation must start with (empty if none or
  // terminated). Stops before a position where the grammar could end.
  std::string find_jump_forward_string();
  // The one token the next mask allows, or -1 when it allows none, several,
  // or EOS (the grammar could end here). A sampler must pick that token
  // whatever the logits say, so jump-forward may append it unsampled and the
  // tokens stay those of an unjumped run. Most states are ruled out from
  // their cached masks alone (two or more accepted tokens); otherwise the
  // mask is filled into `mask` ([mask_words()] scratch) and counted.
  int32_t sole_allowed_token(uint32_t* mask);

  int32_t num_accepted_steps() const { return static_cast<int32_t>(history_.size()) - 1; }

 private:
  struct Step {
    Frontier frontier;
    int32_t arena_size;
    bool eos = false;
    UniqueItems::Mark items{};  // uniqueItems values and text at this step
  };
  const Frontier& current() const { return history_.back().frontier; }
  void push(Frontier f, bool eos);
  // Sets the bits of uncertain tokens of `node` that the full stack accepts.
  void check_uncertain(int32_t node, const StateMask& m, uint32_t* mask);
  // The text written so far (positions of the next bytes start here).
  int32_t text_size() const { return static_cast<int32_t>(history_.back().items.text); }
  // uniqueItems: clears the bits of tokens that end an item repeating an
  // earlier one (a state's accepted tokens assume that its rule may end;
  // where that ends an item, the item decides). See fill_next_token_bitmask.
  void drop_repeated_items(const Frontier& f, uint32_t* mask);
  // Reads `bytes` from the current stacks into `out`; false at the first
  // byte no stack takes. Nothing is pushed: the caller keeps or drops it.
  bool read_bytes(std::string_view bytes, Frontier& out);
  // Whether `bytes` can be read from the current stacks (nothing kept).
  bool can_read(std::string_view bytes);

  std::shared_ptr<const CompiledGrammar> compiled_;
  MatcherOptions options_;
  StackArena arena_;
  PdaWalker walker_;
  std::vector<Step> history_;
  int32_t dropped_steps_ = 0;  // history entries forgotten past max_rollback_tokens
  std::vector<Frontier> scratch_;
  std::vector<int32_t> seen_states_;
  std::vector<int32_t> item_nodes_;  // stacks of the frontier inside a length bound's item rule
  // Only for grammars with uniqueItems item rules (null otherwise).
  std::unique_ptr<UniqueItems> items_;
  std::vector<int32_t> items_in_progress_, repeat_candidates_;
};

}  // namespace brioche::grammar
