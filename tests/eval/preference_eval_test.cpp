// Preference accuracy, margins and their intervals (eval/preference_eval.h).
// Wilson and normal intervals against scipy 1.17 (stats.binomtest(k, n)
// .proportion_ci(method="wilson"); mean ± norm.ppf(0.975)·s/√n).
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "eval/perplexity.h"
#include "eval/preference_eval.h"

namespace brioche::eval {
namespace {

TEST(PreferenceEval, WilsonIntervalMatchesScipy) {
  struct Case {
    int64_t k, n;
    double low, high;
  } cases[] = {{4, 6, 0.299993315138392, 0.9032285888942195},
               {0, 5, 0.0, 0.43448246478317476},
               {10, 10, 0.7224672001371109, 1.0},
               {37, 50, 0.6044684273515115, 0.8412847250644762}};
  for (const Case& c : cases) {
    const MeanInterval w = wilson_interval(c.k, c.n);
    EXPECT_DOUBLE_EQ(w.mean, double(c.k) / double(c.n));
    EXPECT_NEAR(w.low, c.low, 1e-12) << c.k << "/" << c.n;
    EXPECT_NEAR(w.high, c.high, 1e-12) << c.k << "/" << c.n;
  }
}

TEST(PreferenceEval, NormalIntervalMatchesScipy) {
  const double v[] = {1.5, -0.5, 2.0, 3.25, 0.0};
  const MeanInterval m = normal_interval(v);
  EXPECT_DOUBLE_EQ(m.mean, 1.25);
  EXPECT_NEAR(m.low, -0.08291961669525771, 1e-12);
  EXPECT_NEAR(m.high, 2.582919616695258, 1e-12);
  const double one[] = {3.0};
  EXPECT_EQ(normal_interval(one).low, 3.0);
}

TEST(PreferenceEval, SummaryCountsSumsNotMeans) {
  // Pair 1: chosen ahead by sum (−4 > −6) but behind per token (−2 < −1.5).
  const PairLogps pairs[] = {{.chosen_sum = -4, .rejected_sum = -6, .chosen_tokens = 2, .rejected_tokens = 4},
                             {.chosen_sum = -3, .rejected_sum = -3, .chosen_tokens = 3, .rejected_tokens = 3},
                             {.chosen_sum = -10, .rejected_sum = -2, .chosen_tokens = 5, .rejected_tokens = 1}};
  const PreferenceSummary s = summarize_preferences(pairs);
  EXPECT_EQ(s.pairs, 3);
  EXPECT_EQ(s.ties, 1);                        // a tie counts as wrong
  EXPECT_DOUBLE_EQ(s.accuracy.mean, 1.0 / 3);  // only pair 1
  EXPECT_DOUBLE_EQ(s.accuracy_per_token.mean, 0.0);
  EXPECT_DOUBLE_EQ(s.margin.mean, (2.0 + 0.0 - 8.0) / 3);
  EXPECT_DOUBLE_EQ(s.margin_per_token.mean, (-0.5 + 0.0 - 0.0) / 3);
  EXPECT_DOUBLE_EQ(s.chosen_tokens, 10.0 / 3);
}

TEST(PreferenceEval, ComparisonIsPaired) {
  std::vector<PairLogps> base, other;
  for (int i = 0; i < 20; ++i) {
    base.push_back({.chosen_sum = -5, .rejected_sum = i < 10 ? -4.0 : -6.0, .chosen_tokens = 1, .rejected_tokens = 1});
    other.push_back({.chosen_sum = -5, .rejected_sum = i < 2 ? -4.0 : -6.0, .chosen_tokens = 1, .rejected_tokens = 1});
  }
  const PreferenceComparison c = compare_preferences(base, other);
  EXPECT_DOUBLE_EQ(c.accuracy.difference, 0.4);  // 8 of 20 pairs flipped to right
  EXPECT_EQ(c.mcnemar.b_only, 8);
  EXPECT_EQ(c.mcnemar.a_only, 0);
  EXPECT_NEAR(c.mcnemar.p_value, 2.0 / 256, 1e-12);  // two-sided exact: 2 · 0.5^8
  EXPECT_GT(c.accuracy.low, 0.0);
  EXPECT_DOUBLE_EQ(c.margin.mean, 0.8);  // margins −1 → +1 on 8 pairs: +2 · 8 / 20
  EXPECT_THROW(compare_preferences(base, std::span<const PairLogps>(other).first(3)), Error);
}

TEST(Perplexity, TokenWeightedWithABootstrapInterval) {
  const RowLogps rows[] = {
      {.logp_sum = -10, .tokens = 5}, {.logp_sum = -30, .tokens = 10}, {.logp_sum = -3, .tokens = 3}};
  const PerplexitySummary s = summarize_perplexity(rows);
  EXPECT_EQ(s.tokens, 18);
  EXPECT_DOUBLE_EQ(s.nll.mean, 43.0 / 18);  // not the mean of the rows' NLLs (2, 3, 1)
  EXPECT_DOUBLE_EQ(s.perplexity.mean, std::exp(43.0 / 18));
  EXPECT_GE(s.nll.low, 1.0);  // every resample lies between the rows' extremes
  EXPECT_LE(s.nll.high, 3.0);
  EXPECT_LT(s.nll.low, s.nll.mean);
  EXPECT_GT(s.nll.high, s.nll.mean);
  EXPECT_DOUBLE_EQ(s.perplexity.low, std::exp(s.nll.low));
  // Seeded: the same interval every time.
  EXPECT_EQ(summarize_perplexity(rows).nll.low, s.nll.low);
  const RowLogps empty[] = {{.logp_sum = 0, .tokens = 0}};
  EXPECT_THROW(summarize_perplexity(empty), Error);
}

TEST(Perplexity, PairedDifference) {
  const RowLogps base[] = {{-10, 5}, {-30, 10}, {-3, 3}};
  const RowLogps better[] = {{-9, 5}, {-27, 10}, {-2.7, 3}};  // every row 10% less NLL
  const MeanInterval d = compare_perplexity(base, better);
  EXPECT_NEAR(d.mean, -4.3 / 18, 1e-12);
  EXPECT_LT(d.high, 0.0);  // paired: the rows' spread cancels
}

}  // namespace
}  // namespace brioche::eval
