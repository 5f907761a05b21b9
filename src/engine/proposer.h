// Draft proposers for speculative decoding (docs/speculative.md).
//
// A proposer guesses the next few tokens of a sequence; the scheduler runs
// [last token, d1..dk] as one chunk over the sequence's KV and keeps the
// longest prefix the model agrees with (engine/scheduler.cpp verify_drafts).
// Proposals never change the output distribution, only how many forwards it
// takes, so a proposer may be as cheap and as wrong as it likes, provided it
// says which distribution q each draft was drawn from (a point mass for a
// deterministic guess). Two kinds exist: prompt lookup (below) and a small
// draft model (engine/draft_model_proposer.h); EAGLE/Medusa heads would
// implement the same interface.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/constraint.h"
#include "engine/sampler.h"

namespace brioche::engine {

// One sequence asking for drafts in this step.
struct DraftQuery {
  uint64_t sequence = 0;            // stable while the sequence lives (its arrival order)
  std::span<const int32_t> tokens;  // prompt + output so far; the target has K/V for all but the last
  int32_t max_tokens = 0;           // drafts wanted, >= 1
  const SamplingParams* sampling =
      nullptr;  // the request's; a model proposer draws with its temperature and truncation
  // The request's grammar (null: none, or proposing under it is off). A
  // proposer proposes only drafts it allows, walking it with draft_mask() /
  // advance_draft() and leaving it as it found it (DraftGrammarWalk); the
  // scheduler still cuts drafts at the first forbidden one.
  SequenceConstraint* constraint = nullptr;
};

struct Draft {
  std::vector<int32_t> tokens;
  // q of each draft, [tokens.size() * vocab] row-major: the distribution
  // draft i was drawn from (verification accepts it with min(1, p/q)).
  // Empty: each draft is a point mass (deterministic proposers, greedy).
  std::vector<float> probs;
};

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  virtual const char* name() const = 0;
  // One Draft per query, in order (empty tokens: no guess).
  virtual std::vector<Draft> propose(std::span<const DraftQuery> queries) = 0;
  // The sequence finished: whatever the proposer keeps for it goes.
  virtual void forget(uint64_t sequence) { (void)sequence; }
  // The sequence was preempted: memory it holds (draft K/V) goes back, but
  // state that makes its drafts reproducible (a seeded draw stream) stays.
  virtual void evict(uint64_t sequence) { (void)sequence; }
  // Cost of proposing one draft token, relative to one decode step of the
  // target (adaptive speculation length, engine/speculation_length.h).
  virtual double cost_per_draft() const { return 0.0; }
};

// Prompt lookup (n-gram matching): the last n tokens, for n from max_ngram
// down to min_ngram, are searched for earlier in prompt + output; the tokens
// that followed the most recent earlier occurrence are the draft. Strong
// when the output copies from the prompt (editing, extraction, RAG, code),
// free otherwise: no model, O(length * n) per step.
class PromptLookupProposer final : public DraftProposer {
 public:
  PromptLookupProposer(int32_t min_ngram, int32_t max_ngram);
  const char* name() const override { return "prompt-lookup"; }
  std::vector<Draft> propose(std::span<const DraftQuery> queries) override;
  // Up to `max_tokens` tokens that may follow `tokens`; empty when no n-gram
  // matches. Under a grammar (`constraint`), a match whose continuation the
  // grammar forbids from its first token on is passed over for the next
  // one: the first match the grammar allows whole wins, else the one it
  // allows the longest prefix of (cut there), among the first
  // kGrammarCandidates matches.
  std::vector<int32_t> lookup(std::span<const int32_t> tokens, int32_t max_tokens,
                              SequenceConstraint* constraint = nullptr) const;
  static constexpr int32_t kGrammarCandidates = 16;

 private:
  int32_t min_ngram_;
  int32_t max_ngram_;
};

}  // namespace brioche::engine
