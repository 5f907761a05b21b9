// McNemar's exact test against scipy.stats.binomtest (tools/oracle/
// ifeval_reference.py stats) and hand-computed binomial tails; the paired
// bootstrap on cases whose interval is known.
#include <gtest/gtest.h>

#include "eval/paired_stats.h"

namespace brioche::eval {
namespace {

TEST(McNemar, ExactPValuesEqualScipy) {
  // {b, c, p} from scipy.stats.binomtest(b, b + c, 0.5).pvalue (two-sided).
  struct Case {
    int b, c;
    double p;
  };
  const Case cases[] = {
#include "golden/mcnemar_scipy.inc"
  };
  for (const Case& k : cases) EXPECT_NEAR(mcnemar_exact_p(k.b, k.c), k.p, 1e-9 * k.p) << k.b << " " << k.c;
}

TEST(McNemar, HandComputedTails) {
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(0, 0), 1.0);
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(5, 0), 2.0 / 32);               // 2 * 0.5^5
  EXPECT_NEAR(mcnemar_exact_p(3, 7), 2.0 * 176 / 1024, 1e-12);     // 2 * (1+10+45+120)/2^10
  EXPECT_NEAR(mcnemar_exact_p(10, 4), 2.0 * 1471 / 16384, 1e-12);  // 2 * (1+14+91+364+1001)/2^14
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(7, 7), 1.0);                    // capped at 1
}

TEST(McNemar, CountsDiscordantPairs) {
  const std::vector<bool> a = {true, true, false, false, true, false};
  const std::vector<bool> b = {true, false, true, true, true, false};
  const McNemarResult r = mcnemar_exact(a, b);
  EXPECT_EQ(r.a_only, 1);
  EXPECT_EQ(r.b_only, 2);
  EXPECT_DOUBLE_EQ(r.p_value, 1.0);  // 2 * P(X <= 1 | n = 3) = 2 * 4/8
  EXPECT_THROW(mcnemar_exact({true}, {true, false}), std::exception);
}

PairedUnits prompt_level(const std::vector<int>& a, const std::vector<int>& b) {
  return {a, b, std::vector<int>(a.size(), 1)};
}

TEST(PairedBootstrap, IdenticalModelsGiveAZeroInterval) {
  std::vector<int> a(200);
  for (size_t i = 0; i < a.size(); ++i) a[i] = i % 3 == 0;
  const BootstrapInterval r = paired_bootstrap(prompt_level(a, a));
  EXPECT_EQ(r.difference, 0);
  EXPECT_EQ(r.low, 0);
  EXPECT_EQ(r.high, 0);
}

TEST(PairedBootstrap, AClearGainExcludesZeroAndIsReproducible) {
  // 541 prompts: B gains 30, loses 10 (McNemar p ~ 0.002).
  std::vector<int> a(541, 0), b(541, 0);
  for (int i = 0; i < 150; ++i) a[i] = b[i] = 1;
  for (int i = 150; i < 180; ++i) b[i] = 1;
  for (int i = 180; i < 190; ++i) a[i] = 1;
  const BootstrapInterval r = paired_bootstrap(prompt_level(a, b));
  EXPECT_DOUBLE_EQ(r.difference, 20.0 / 541);
  EXPECT_GT(r.low, 0);
  EXPECT_LT(r.low, r.difference);
  EXPECT_GT(r.high, r.difference);
  // The standard error of the paired difference is sqrt((b + c)/n - d^2)/sqrt(n) ~ 0.0113;
  // a 95% interval spans about 2 x 1.96 of it.
  EXPECT_NEAR(r.high - r.low, 2 * 1.96 * 0.01130, 0.006);
  const BootstrapInterval again = paired_bootstrap(prompt_level(a, b));
  EXPECT_EQ(again.low, r.low);
  EXPECT_EQ(again.high, r.high);
  EXPECT_LT(mcnemar_exact_p(10, 30), 0.01);
}

TEST(PairedBootstrap, InstructionLevelWeighsPromptsByTheirInstructions) {
  // Two prompts: one with 3 instructions (A 1, B 3), one with 1 (A 1, B 0).
  const PairedUnits d{{1, 1}, {3, 0}, {3, 1}};
  const BootstrapInterval r = paired_bootstrap(d, 2000);
  EXPECT_DOUBLE_EQ(r.difference, (3.0 - 2.0) / 4);
  EXPECT_GE(r.low, -1.0);      // both picks the 1-instruction prompt: -1
  EXPECT_LE(r.high, 2.0 / 3);  // both picks the 3-instruction prompt: +2/3
  EXPECT_THROW(paired_bootstrap({{1}, {1, 0}, {1}}), std::exception);
}

}  // namespace
}  // namespace brioche::eval
