// Log-probabilities of tokenized rows under a frozen model (base, or base +
// LoRA adapter), without gradients, for evaluation: the trainer's own
// forward and LM head (objective.h batch_logps), so `brioche eval
// preference/perplexity` read the numbers training optimises.
//
//   pairs     one forward per pair over [prompt; chosen; rejected] (the
//             prefix-shared layout, batch_builder.h); sequence 2i is the
//             chosen reply, 2i+1 the rejected: Σ log p over reply tokens only
//             (the first reply token is scored from the prompt's last row).
//   examples  one sequence each; scope Response scores the reply tokens (a
//             text row, which has no prompt: every token after the first),
//             Full also the prompt's tokens after its first.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "train/batch_builder.h"
#include "train/losses.h"
#include "train/train_model.h"

namespace brioche::train {

struct ScoringOptions {
  int batch_size = 8;                                       // rows (pairs) per forward
  int64_t head_chunk = 4096;                                // vocabulary rows per LM-head tile (0 = full logits)
  bool adapter_enabled = true;                              // false: the frozen base of a model built with an adapter
  std::function<void(size_t done, size_t total)> progress;  // after each batch, or empty
};

std::vector<SequenceLogps> score_pairs(TrainModel& model, std::span<const TokenizedPair> pairs,
                                       const ScoringOptions& options);
std::vector<SequenceLogps> score_examples(TrainModel& model, std::span<const TokenizedExample> examples, SftScope scope,
                                          const ScoringOptions& options);

}  // namespace brioche::train
