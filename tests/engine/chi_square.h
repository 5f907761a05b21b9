// A two-sample chi-square test of homogeneity for the speculative sampling
// tests: token sequences drawn with speculation against as many drawn
// without, counted over the same cells.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

namespace brioche::engine::testing {

// Two samples of equal size over the same cells: a chi-square test of
// homogeneity (cells with fewer than 20 samples in both together pooled
// into one) at significance 0.001. Deterministic where the samples are
// (fixed seeds).
inline void expect_same_distribution(const std::vector<int>& with, const std::vector<int>& without) {
  std::vector<std::pair<int, int>> cells;
  std::pair<int, int> rare{0, 0};
  for (size_t c = 0; c < with.size(); ++c) {
    if (with[c] + without[c] < 20)
      rare = {rare.first + with[c], rare.second + without[c]};
    else
      cells.push_back({with[c], without[c]});
  }
  if (rare.first + rare.second > 0) cells.push_back(rare);
  double chi = 0;
  for (auto [a, b] : cells) chi += double(a - b) * double(a - b) / double(a + b);  // equal totals: sum (a-b)^2/(a+b)
  const int df = int(cells.size()) - 1;
  ASSERT_GE(df, 10) << "too few cells to test";
  // Critical value of chi-square at 0.001 (Wilson-Hilferty approximation).
  const double z = 3.0902, k = double(df);
  const double critical = k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
  EXPECT_LT(chi, critical) << df << " degrees of freedom";
}

}  // namespace brioche::engine::testing
