// Draft proposers for speculative decoding (docs/speculative.md).
//
// A proposer guesses the next few tokens of a sequence; the scheduler runs
// [last token, d1..dk] as one chunk over the sequence's KV and keeps the
// longest prefix the model agrees with (engine/scheduler.cpp verify_drafts).
// Proposals never change the output, only how many forwards it takes, so a
// proposer may be as cheap and as wrong as it likes. Another kind (a draft
// model, EAGLE/Medusa heads) implements the same interface.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace brioche::engine {

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  // Up to `max_tokens` tokens that may follow `tokens` (prompt + output so
  // far); empty when it has no guess.
  virtual std::vector<int32_t> propose(std::span<const int32_t> tokens, int32_t max_tokens) const = 0;
};

// Prompt lookup (n-gram matching): the last n tokens, for n from max_ngram
// down to min_ngram, are searched for earlier in prompt + output; the tokens
// that followed the most recent earlier occurrence are the draft. Strong
// when the output copies from the prompt (editing, extraction, RAG, code),
// free otherwise: no model, O(length * n) per step.
class PromptLookupProposer final : public DraftProposer {
 public:
  PromptLookupProposer(int32_t min_ngram, int32_t max_ngram);
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int32_t max_tokens) const override;

 private:
  int32_t min_ngram_;
  int32_t max_ngram_;
};

}  // namespace brioche::engine
