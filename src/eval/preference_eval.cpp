#include "eval/preference_eval.h"

#include <cmath>

#include "core/error.h"

namespace brioche::eval {

namespace {

constexpr double kZ95 = 1.959963984540054;  // the standard normal's 97.5th percentile

nlohmann::ordered_json interval_json(const MeanInterval& m) {
  return {{"mean", m.mean}, {"low", m.low}, {"high", m.high}};
}

}  // namespace

double PairLogps::margin_per_token() const {
  return chosen_sum / std::max(1, chosen_tokens) - rejected_sum / std::max(1, rejected_tokens);
}

MeanInterval wilson_interval(int64_t k, int64_t n) {
  if (n <= 0) return {};
  const double p = double(k) / double(n), z2 = kZ95 * kZ95, nn = double(n);
  const double center = (p + z2 / (2 * nn)) / (1 + z2 / nn);
  const double half = kZ95 * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / (1 + z2 / nn);
  return {.mean = p, .low = std::max(0.0, center - half), .high = std::min(1.0, center + half)};
}

MeanInterval normal_interval(std::span<const double> v) {
  if (v.empty()) return {};
  double sum = 0;
  for (double x : v) sum += x;
  const double mean = sum / double(v.size());
  if (v.size() < 2) return {mean, mean, mean};
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  const double half = kZ95 * std::sqrt(ss / double(v.size() - 1) / double(v.size()));
  return {mean, mean - half, mean + half};
}

PreferenceSummary summarize_preferences(std::span<const PairLogps> pairs) {
  PreferenceSummary s;
  s.pairs = int64_t(pairs.size());
  if (pairs.empty()) return s;
  int64_t correct = 0, correct_per_token = 0;
  std::vector<double> margins, margins_per_token;
  for (const PairLogps& p : pairs) {
    correct += p.correct();
    s.ties += p.chosen_sum == p.rejected_sum;
    correct_per_token += p.margin_per_token() > 0;
    margins.push_back(p.margin());
    margins_per_token.push_back(p.margin_per_token());
    s.chosen_logp += p.chosen_sum, s.rejected_logp += p.rejected_sum;
    s.chosen_tokens += p.chosen_tokens, s.rejected_tokens += p.rejected_tokens;
  }
  const double n = double(pairs.size());
  s.accuracy = wilson_interval(correct, s.pairs);
  s.accuracy_per_token = wilson_interval(correct_per_token, s.pairs);
  s.margin = normal_interval(margins);
  s.margin_per_token = normal_interval(margins_per_token);
  s.chosen_logp /= n, s.rejected_logp /= n, s.chosen_tokens /= n, s.rejected_tokens /= n;
  return s;
}

nlohmann::ordered_json PreferenceSummary::to_json() const {
  return {{"pairs", pairs},
          {"accuracy", interval_json(accuracy)},
          {"accuracy_per_token", interval_json(accuracy_per_token)},
          {"ties", ties},
          {"margin", interval_json(margin)},
          {"margin_per_token", interval_json(margin_per_token)},
          {"chosen_logp", chosen_logp},
          {"rejected_logp", rejected_logp},
          {"chosen_tokens", chosen_tokens},
          {"rejected_tokens", rejected_tokens}};
}

PreferenceComparison compare_preferences(std::span<const PairLogps> base, std::span<const PairLogps> other) {
  BRIOCHE_CHECK(base.size() == other.size() && !base.empty(), "preference comparison: ", base.size(), " and ",
                other.size(), " pairs (expected the same pairs, at least one)");
  PairedUnits units;
  std::vector<bool> a, b;
  std::vector<double> margin_diff;
  for (size_t i = 0; i < base.size(); ++i) {
    units.a_followed.push_back(base[i].correct());
    units.b_followed.push_back(other[i].correct());
    units.units.push_back(1);
    a.push_back(base[i].correct());
    b.push_back(other[i].correct());
    margin_diff.push_back(other[i].margin() - base[i].margin());
  }
  return {.accuracy = paired_bootstrap(units), .mcnemar = mcnemar_exact(a, b), .margin = normal_interval(margin_diff)};
}

nlohmann::ordered_json PreferenceComparison::to_json() const {
  return {{"accuracy_difference", {{"mean", accuracy.difference}, {"low", accuracy.low}, {"high", accuracy.high}}},
          {"mcnemar", {{"base_only", mcnemar.a_only}, {"adapter_only", mcnemar.b_only}, {"p_value", mcnemar.p_value}}},
          {"margin_difference", interval_json(margin)}};
}

}  // namespace brioche::eval
