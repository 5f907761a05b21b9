#include "engine/speculation_length.h"

#include <algorithm>
#include <cmath>

namespace brioche::engine {

int32_t SpeculationLength::best_length(double acceptance, int32_t max_drafts, const SpeculationCosts& costs) {
  const double a = std::clamp(acceptance, 0.0, 0.999);
  const double per_draft = costs.row + costs.draft;
  int32_t best = 0;
  double best_value = 1.0;  // k = 0: one token for one step
  double expected = 1.0, power = 1.0;
  for (int32_t k = 1; k <= max_drafts; ++k) {
    power *= a;
    expected += power;  // E(k) = sum_{i=0..k} a^i
    const double value = expected / (1.0 + double(k) * per_draft);
    if (value > best_value * (1.0 + 1e-9)) {
      best_value = value;
      best = k;
    }
  }
  return best;
}

int32_t SpeculationLength::next(const Budget& budget) {
  const int32_t max_drafts = budget.max_drafts;
  if (!budget.adaptive || max_drafts <= 0) return std::max(max_drafts, 0);
  int32_t k = best_length(acceptance(), max_drafts, budget.costs);
  if (k == 0 && ++idle_steps_ >= kProbeInterval) k = 1;
  if (k > 0) idle_steps_ = 0;
  return k;
}

void SpeculationLength::record(int32_t proposed, int32_t accepted) {
  if (proposed <= 0) return;
  accepted_ = accepted_ * kDecay + double(accepted);
  rejected_ = rejected_ * kDecay + (accepted < proposed ? 1.0 : 0.0);
}

}  // namespace brioche::engine
