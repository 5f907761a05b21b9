// The adaptive speculation length: the k that maximises expected tokens per
// unit of cost, and the per-sequence estimate that drives it.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/speculation_length.h"

namespace brioche::engine {
namespace {

// E(k) / (1 + k c) by brute force, for comparison.
double value(double a, int k, double c) {
  double e = 0;
  for (int i = 0; i <= k; ++i) e += std::pow(a, i);
  return e / (1 + k * c);
}

TEST(SpeculationLength, BestLengthMaximisesTokensPerCost) {
  const SpeculationCosts costs{.row = 0.1, .draft = 0.05};
  for (double a : {0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99}) {
    const int k = SpeculationLength::best_length(a, 8, costs);
    for (int other = 0; other <= 8; ++other)
      EXPECT_GE(value(a, k, 0.15) + 1e-12, value(a, other, 0.15)) << "a " << a << " k " << k << " vs " << other;
  }
  // Nothing is worth speculating when drafts never land; everything when they always do.
  EXPECT_EQ(SpeculationLength::best_length(0.0, 8, costs), 0);
  EXPECT_EQ(SpeculationLength::best_length(0.999, 8, costs), 8);
  // Free drafts and free rows: any acceptance above 0 wants the maximum.
  EXPECT_EQ(SpeculationLength::best_length(0.2, 6, {.row = 0, .draft = 0}), 6);
}

TEST(SpeculationLength, FollowsTheSequencesAcceptanceAndProbesWhenOff) {
  const SpeculationCosts costs{.row = 0.2, .draft = 0.0};
  SpeculationLength length;
  EXPECT_GT(length.next({.max_drafts = 6, .costs = costs}), 0);  // the prior speculates
  for (int i = 0; i < 20; ++i) length.record(4, 0);
  EXPECT_LT(length.acceptance(), 0.05);
  int speculated = 0;
  for (int step = 0; step < 32; ++step) speculated += length.next({.max_drafts = 6, .costs = costs}) > 0;
  EXPECT_EQ(speculated, 32 / SpeculationLength::kProbeInterval) << "one probe every kProbeInterval steps";
  for (int i = 0; i < 20; ++i) length.record(4, 4);
  EXPECT_GT(length.acceptance(), 0.9);
  EXPECT_EQ(length.next({.max_drafts = 6, .costs = costs}), 6);
  EXPECT_EQ(length.next({.max_drafts = 6, .costs = costs, .adaptive = false}), 6);
  length.record(0, 0);  // no guess: no evidence
  EXPECT_GT(length.acceptance(), 0.9);
}

}  // namespace
}  // namespace brioche::engine
