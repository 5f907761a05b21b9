#include "train/sequence_scoring.h"

#include <memory>

#include "core/error.h"
#include "train/lm_head.h"
#include "train/objective.h"

namespace brioche::train {

namespace {

std::unique_ptr<LogpHead> make_head(const TrainModel& model, int64_t chunk) {
  if (chunk > 0) return std::make_unique<FusedLogpHead>(model.weights().output, chunk);
  return std::make_unique<PlainLogpHead>(model.weights().output);
}

// Runs batches of `batch_size` rows through build(first, count) and collects
// the per-sequence log-probs in row order.
template <typename Build>
std::vector<SequenceLogps> score_batches(TrainModel& model, size_t rows, const ScoringOptions& o, Build build) {
  BRIOCHE_CHECK(o.batch_size >= 1, "scoring: batch size must be >= 1, got ", o.batch_size);
  auto head = make_head(model, o.head_chunk);
  std::vector<SequenceLogps> out;
  for (size_t first = 0; first < rows; first += size_t(o.batch_size)) {
    const size_t count = std::min(size_t(o.batch_size), rows - first);
    const TokenBatch batch = build(first, count);
    const std::vector<SequenceLogps> lp = batch_logps(model, *head, batch, o.adapter_enabled);
    out.insert(out.end(), lp.begin(), lp.end());
    if (o.progress) o.progress(first + count, rows);
  }
  return out;
}

}  // namespace

std::vector<SequenceLogps> score_pairs(TrainModel& model, std::span<const TokenizedPair> pairs,
                                       const ScoringOptions& o) {
  // DPO's layout scores reply tokens only (no prompt NLL term).
  const PreferenceBatchOptions layout{.method = Method::DPO, .sft_scope = SftScope::Response, .prefix_shared = true};
  return score_batches(model, pairs.size(), o, [&](size_t first, size_t count) {
    std::vector<const TokenizedPair*> ptrs;
    for (size_t i = first; i < first + count; ++i) ptrs.push_back(&pairs[i]);
    return build_preference_batch(ptrs, layout);
  });
}

std::vector<SequenceLogps> score_examples(TrainModel& model, std::span<const TokenizedExample> examples, SftScope scope,
                                          const ScoringOptions& o) {
  return score_batches(model, examples.size(), o, [&](size_t first, size_t count) {
    std::vector<const TokenizedExample*> ptrs;
    for (size_t i = first; i < first + count; ++i) ptrs.push_back(&examples[i]);
    return build_sft_batch(ptrs, scope);
  });
}

}  // namespace brioche::train
