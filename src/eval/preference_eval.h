// Preference accuracy and margin of a model on {prompt, chosen, rejected}
// pairs, from each reply's summed log-probability under the model:
//
//   R = Σ_t log p(reply_t | prompt, reply_<t)   over the reply's tokens (the prompt is not scored)
//   ℓ = R / n                                   (per-token mean; n = the reply's tokens)
//
//   accuracy            share of pairs with R_chosen > R_rejected (a tie counts as wrong),
//                       95% Wilson score interval
//   accuracy_per_token  the same on ℓ (length-normalised; the trainer's eval accuracy)
//   margin              mean of R_chosen − R_rejected (nats), 95% interval mean ± 1.96·s/√n
//   margin_per_token    mean of ℓ_chosen − ℓ_rejected, same interval
//
// Against a base on the same pairs: the accuracy difference with a paired
// bootstrap interval and McNemar's exact test (paired_stats.h), the margin
// difference with a paired normal interval.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/paired_stats.h"

namespace brioche::eval {

struct PairLogps {
  double chosen_sum = 0, rejected_sum = 0;  // R
  int chosen_tokens = 0, rejected_tokens = 0;
  bool correct() const { return chosen_sum > rejected_sum; }
  double margin() const { return chosen_sum - rejected_sum; }
  double margin_per_token() const;
};

struct MeanInterval {
  double mean = 0, low = 0, high = 0;
};

// 95% Wilson score interval of k successes in n.
MeanInterval wilson_interval(int64_t k, int64_t n);
// mean ± 1.96·s/√n of values (s the sample standard deviation; n = 1 gives a zero-width interval).
MeanInterval normal_interval(std::span<const double> values);

struct PreferenceSummary {
  int64_t pairs = 0, ties = 0;
  MeanInterval accuracy, accuracy_per_token, margin, margin_per_token;
  double chosen_logp = 0, rejected_logp = 0;      // mean R
  double chosen_tokens = 0, rejected_tokens = 0;  // mean n
  nlohmann::ordered_json to_json() const;
};
PreferenceSummary summarize_preferences(std::span<const PairLogps> pairs);

struct PreferenceComparison {
  BootstrapInterval accuracy;  // other − base
  McNemarResult mcnemar;       // a_only: base right, other wrong
  MeanInterval margin;         // paired: mean of (other − base) margins
  nlohmann::ordered_json to_json() const;
};
PreferenceComparison compare_preferences(std::span<const PairLogps> base, std::span<const PairLogps> other);

}  // namespace brioche::eval
