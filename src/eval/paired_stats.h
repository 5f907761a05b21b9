// Paired comparison of two models on the same prompts: each prompt is
// followed (1) or not (0) by A and by B.
//
// McNemar's exact test: only discordant prompts carry information; under
// "no difference" the b prompts A passes and B fails, and the c the other
// way, split as Binomial(b + c, 1/2). Two-sided p = min(1, 2·P(X ≤ min(b, c))).
//
// Paired bootstrap: resample prompts with replacement (fixed seed), the
// difference of means (B − A) each time; the 2.5 and 97.5 percentiles are
// the 95% interval. For instruction-level accuracy the resampled unit is
// still the prompt (its instructions travel together).
#pragma once

#include <cstdint>
#include <vector>

namespace brioche::eval {

struct McNemarResult {
  int a_only = 0;  // b: A followed, B did not
  int b_only = 0;  // c: B followed, A did not
  double p_value = 1;
};
McNemarResult mcnemar_exact(const std::vector<bool>& a, const std::vector<bool>& b);
// Two-sided exact p for b and c discordant counts.
double mcnemar_exact_p(int b, int c);

struct BootstrapInterval {
  double difference = 0;  // B − A on the sample
  double low = 0, high = 0;
};
struct PairedUnits {
  // Per prompt: units followed by A and by B, and the number of units
  // (1 for prompt-level accuracy, its instructions for instruction-level).
  std::vector<int> a_followed, b_followed, units;
};
BootstrapInterval paired_bootstrap(const PairedUnits& data, int resamples = 10000, uint64_t seed = 20231107,
                                   double confidence = 0.95);

}  // namespace brioche::eval
