// How many drafts a sequence asks for in its next step (docs/speculative.md,
// "Adaptive length").
//
// Drafts are accepted one after another until the first rejection, so with
// a per-token acceptance probability a, a step that verifies k drafts yields
//   E(k) = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)
// tokens (the model's own token after the last accepted draft included) and
// costs about 1 + k (c_row + c_draft) decodes, where c_row is the price of one
// more row in the verify forward and c_draft that of proposing one draft
// (both relative to a decode step). The length chosen maximises
// E(k) / cost(k) over k = 0..max; k = 0 (no speculation) is worth 1.
//
// a is estimated per sequence from its own verify steps as
// accepted / (accepted + rejections), the maximum-likelihood estimate for
// such runs of Bernoulli trials, with counts decayed by `kDecay` per step so
// that it follows the text (copying a passage, then writing freely). A
// sequence whose estimate says "do not speculate" still probes with one
// draft every `kProbeInterval` steps, so a change back is noticed.
#pragma once

#include <cstdint>

namespace brioche::engine {

struct SpeculationCosts {
  double row = 0.1;    // c_row: one more verify row, relative to a decode step
  double draft = 0.0;  // c_draft: proposing one draft, relative to a decode step
};

class SpeculationLength {
 public:
  static constexpr double kDecay = 0.85;
  static constexpr int32_t kProbeInterval = 8;

  // What a step may draft, and how.
  struct Budget {
    int32_t max_drafts = 0;
    SpeculationCosts costs;
    bool adaptive = true;  // false: always max_drafts
  };
  // Drafts to ask for, in [0, budget.max_drafts].
  int32_t next(const Budget& budget);
  // One verify step's outcome: `proposed` drafts checked, `accepted` of them kept
  // (a prefix). Steps whose proposer had no guess are not recorded.
  void record(int32_t proposed, int32_t accepted);
  double acceptance() const { return accepted_ / (accepted_ + rejected_); }

  // The best k for a known acceptance (exposed for tests).
  static int32_t best_length(double acceptance, int32_t max_drafts, const SpeculationCosts& costs);

 private:
  // Prior: two accepted, one rejected (a = 2/3), worth one step of evidence
  // before the sequence's own steps outweigh it.
  double accepted_ = 2.0;
  double rejected_ = 1.0;
  int32_t idle_steps_ = 0;  // steps since the last one that speculated
};

}  // namespace brioche::engine
