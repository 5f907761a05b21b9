// Speculative decoding with a small draft model (docs/speculative.md,
// "Draft model"): `--draft-model FILE`.
//
// The draft model shares the target's tokenizer and runs on its own paged
// KV cache (its own block allocator, no prefix sharing). Per sequence it
// keeps the tokens whose K/V it holds; each step it
//   1. keeps the longest prefix those share with the sequence's tokens now
//      (rejected drafts and anything after them fall away: their positions
//      are rewritten, their blocks go back), at most all but the last token,
//   2. runs the rest (the prompt on the first step, then usually the last
//      accepted draft and the target's own token) as a prefill chunk whose
//      last row gives draft 1,
//   3. runs each draft as one decode row to get the next, k - 1 times.
// All sequences asking in a step go through each of these forwards together.
// Greedy requests take the draft's argmax; sampled ones draw from the
// draft's distribution q (the request's logit bias, temperature and
// top-k/top-p/min-p, and the grammar's mask: the drafts are walked on the
// request's matcher and rolled back, so every draft is grammatical; no
// penalties) and hand q to the verifier, whose rejection rule makes the
// output follow the target's distribution whatever q is.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/block_allocator.h"
#include "engine/model_runner.h"
#include "engine/proposer.h"

namespace brioche::engine {

class DraftModelProposer final : public DraftProposer {
 public:
  // `cost_per_draft`: one draft decode relative to one target decode (the
  // engine passes the ratio of their weight bytes: decode reads the weights).
  DraftModelProposer(std::unique_ptr<ModelRunner> draft, double cost_per_draft);
  const char* name() const override { return "draft-model"; }
  std::vector<Draft> propose(std::span<const DraftQuery> queries) override;
  void forget(uint64_t sequence) override;
  void evict(uint64_t sequence) override;
  double cost_per_draft() const override { return cost_per_draft_; }

  // For tests: blocks of the draft cache in use, and sequences with state.
  int32_t used_blocks() const { return blocks_.total_blocks() - blocks_.available_blocks(); }
  size_t tracked_sequences() const { return states_.size(); }

 private:
  struct SequenceDraft {
    std::vector<int32_t> cached;       // tokens whose K/V is in the draft cache, positions 0..size-1
    std::vector<int32_t> block_table;  // covers at least `cached`
    std::unique_ptr<Sampler> sampler;  // draws this sequence's drafts (seeded from the request's seed)
  };
  // Frees blocks past those covering `n_positions`.
  void trim_blocks(SequenceDraft& state, int32_t n_positions);
  bool ensure_blocks(SequenceDraft& state, int32_t n_positions);
  // Draws the next draft from logits row `row` of logits_ into `draft` (q
  // appended when sampled), under `constraint`'s mask when there is one,
  // advancing its walk. False: the grammar allows no further draft.
  bool draw(SequenceDraft& state, int32_t row, SequenceConstraint* constraint, Draft& draft);

  std::unique_ptr<ModelRunner> runner_;
  double cost_per_draft_;
  BlockAllocator blocks_;
  std::unordered_map<uint64_t, SequenceDraft> states_;
  model::ForwardBatch batch_;
  Tensor logits_;
};

}  // namespace brioche::engine
