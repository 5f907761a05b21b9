// Grammar-constrained decoding for one sequence: the bridge between a
// compiled grammar (grammar/) and the scheduler's sampling loop.
//
// Per step the scheduler asks next_mask() for the allowed-token bitmask (it
// goes into SamplerRow::allowed_mask, applied after penalties and logit bias,
// before temperature/truncation), samples, and hands the token to accept().
// A sequence whose grammar terminated is finished with "stop" by the
// scheduler and never sampled again (its next mask would allow nothing).
//
// Thinking models: the grammar constrains the answer, not the reasoning. With
// `reasoning_close` set the constraint is dormant (no mask) while the output
// is inside the reasoning block and starts when the close tag has been
// generated; bytes after the tag in the same token are fed to the matcher.
// `reasoning_open_token` lets the model choose to open a block at its first
// step (that token is added to the first mask).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/compiler.h"
#include "grammar/matcher.h"

namespace brioche::tokenizer {
class Tokenizer;
}

namespace brioche::engine {

struct GrammarConstraint {
  std::shared_ptr<const grammar::CompiledGrammar> compiled;  // null: unconstrained
  bool starts_in_reasoning = false;                          // the prompt left a reasoning block open
  int32_t reasoning_open_token = -1;                         // >= 0: allowed as the first token; opens a block
  std::string reasoning_close;                               // e.g. "</think>"; needed with either of the two above
  // Jump-forward: while the grammar allows exactly one token, that token is
  // appended without sampling (any sampler would have picked it), and the
  // chain is computed as prefill rows of the next forward. The tokens are
  // those of an unjumped run. Not used with logprobs.
  bool jump_forward = false;
};

class SequenceConstraint {
 public:
  explicit SequenceConstraint(const GrammarConstraint& constraint);

  // Allowed tokens for the next step ([mask words]), or null while dormant
  // (inside reasoning). `*any_allowed` is false when the grammar allows no
  // token at all (the caller finishes the sequence instead of sampling).
  const uint32_t* next_mask(bool* any_allowed);
  // Advances by a generated token whose bytes are `bytes`. False when the
  // grammar rejected it (state unchanged); the scheduler keeps going, as the
  // reference design does: a reject after masking means vocabulary drift.
  bool accept(int32_t token, std::string_view bytes);
  // How many of `drafts` the grammar accepts one after another from here
  // (speculative decoding: drafts from the first forbidden one on are not
  // run). The matcher walks them and rolls back, so its state is unchanged.
  // All of them while dormant (inside reasoning: nothing is masked there).
  int32_t allowed_prefix(std::span<const int32_t> drafts);
  // Proposing under the grammar (speculative decoding: a draft model draws
  // each draft from its logits masked by draft_mask(), then advance_draft()s
  // the matcher over it, so every draft is one the grammar allows). Drafts
  // are walked on the matcher itself and undone by rollback_drafts(), which
  // the proposer calls before it returns (DraftGrammarWalk does): the
  // sequence's own state never sees an unverified draft. While dormant
  // (inside reasoning, or before the model chose whether to open a block)
  // there is no mask and nothing is walked.
  // The mask after the drafts walked so far, or null while dormant;
  // `*any_allowed` false: the grammar allows nothing more (stop drafting).
  const uint32_t* draft_mask(bool* any_allowed);
  // False when the grammar rejects `token` (state unchanged; stop drafting).
  bool advance_draft(int32_t token);
  void rollback_drafts();
  int32_t walked_drafts() const { return draft_steps_; }
  bool active() const { return phase_ == Phase::Active; }
  // The grammar is complete and allows nothing more (or EOS was accepted).
  bool terminated() const { return active() && matcher_.is_terminated(); }
  // The string every continuation must start with; empty when dormant or none.
  std::string forced_continuation();
  // The only token the next mask allows (never EOS), or -1: none, several,
  // or dormant (inside reasoning, or the reasoning-open token is allowed).
  int32_t sole_allowed_token();
  int32_t rejected_tokens() const { return rejected_; }

 private:
  enum class Phase : uint8_t { MayOpenReasoning, InReasoning, Active };

  grammar::GrammarMatcher matcher_;
  std::string reasoning_close_;
  int32_t reasoning_open_token_ = -1;
  Phase phase_ = Phase::Active;
  std::string reasoning_tail_;  // last bytes of the reasoning text (close-tag search window)
  std::vector<uint32_t> mask_;
  std::vector<uint32_t> draft_mask_;  // draft_mask()'s own buffer: mask_ stays the sequence's
  int32_t draft_steps_ = 0;           // drafts walked since the last rollback_drafts()
  int32_t rejected_ = 0;
};

// Rolls a constraint's draft walk back when it goes out of scope (also when
// a draft forward throws), so the sequence's matcher is left as it was.
class DraftGrammarWalk {
 public:
  explicit DraftGrammarWalk(SequenceConstraint* constraint) : constraint_(constraint) {}
  ~DraftGrammarWalk() {
    if (constraint_) constraint_->rollback_drafts();
  }
  DraftGrammarWalk(const DraftGrammarWalk&) = delete;
  DraftGrammarWalk& operator=(const DraftGrammarWalk&) = delete;
  DraftGrammarWalk(DraftGrammarWalk&& other) noexcept : constraint_(std::exchange(other.constraint_, nullptr)) {}
  DraftGrammarWalk& operator=(DraftGrammarWalk&&) = delete;

 private:
  SequenceConstraint* constraint_;
};

// The grammar engine's view of a tokenizer: every id's bytes, its special
// ids and end-of-generation ids; the mask is `mask_vocab_size` wide (the
// model's logits row, which may be padded past the tokenizer).
std::shared_ptr<const grammar::Vocabulary> grammar_vocabulary(const tokenizer::Tokenizer& tokenizer,
                                                              int32_t mask_vocab_size);

}  // namespace brioche::engine
