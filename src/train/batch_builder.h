// Lays tokenized examples out as a TokenBatch and marks the scored tokens.
//
// A sequence [t_0 .. t_{L−1}] is scored from row k−1 for target t_k. Prompt
// targets (k < P) are scored only where the objective reads them: SFT with
// sft_scope=full, and the chosen branch of ORPO with sft_scope=full.
//
// Prefix-shared preference layout (one span):
//   rows  [prompt(P); chosen(Rc); rejected(Rr)]
//   pos   0..P−1,   P..P+Rc−1,   P..P+Rr−1          (each branch restarts at P)
//   branch 0,        1,           2                 (rejected rows do not see chosen rows)
//   chosen[k] scored from row P−1+k; rejected[0] from row P−1, rejected[k≥1] from row P+Rc+k−1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "train/losses.h"
#include "train/token_batch.h"

namespace brioche::train {

struct TokenizedExample {
  std::vector<int32_t> prompt;  // may be empty (plain text: every token after the first is scored)
  std::vector<int32_t> response;
};

struct TokenizedPair {
  std::vector<int32_t> prompt;  // at least one token
  std::vector<int32_t> chosen;
  std::vector<int32_t> rejected;
};

TokenBatch build_sft_batch(std::span<const TokenizedExample* const> examples, SftScope scope);

struct PreferenceBatchOptions {
  Method method = Method::ORPO;
  SftScope sft_scope = SftScope::Full;
  bool prefix_shared = false;
};
TokenBatch build_preference_batch(std::span<const TokenizedPair* const> pairs, const PreferenceBatchOptions& options);

}  // namespace brioche::train
