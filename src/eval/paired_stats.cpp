#include "eval/paired_stats.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"

namespace brioche::eval {

double mcnemar_exact_p(int b, int c) {
  const int n = b + c;
  if (n == 0) return 1.0;
  const int k = std::min(b, c);
  // P(X <= k) for X ~ Binomial(n, 1/2), summed in log space (n can be hundreds).
  double tail = 0;
  for (int i = 0; i <= k; ++i)
    tail += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) - n * std::log(2.0));
  return std::min(1.0, 2.0 * tail);
}

McNemarResult mcnemar_exact(const std::vector<bool>& a, const std::vector<bool>& b) {
  BRIOCHE_CHECK(a.size() == b.size(), "McNemar: paired samples of ", a.size(), " and ", b.size(), " prompts");
  McNemarResult r;
  for (size_t i = 0; i < a.size(); ++i) {
    r.a_only += a[i] && !b[i];
    r.b_only += !a[i] && b[i];
  }
  r.p_value = mcnemar_exact_p(r.a_only, r.b_only);
  return r;
}

BootstrapInterval paired_bootstrap(const PairedUnits& d, int resamples, uint64_t seed, double confidence) {
  const size_t n = d.units.size();
  BRIOCHE_CHECK(n > 0 && d.a_followed.size() == n && d.b_followed.size() == n, "paired bootstrap: ", n,
                " prompts with ", d.a_followed.size(), " and ", d.b_followed.size(), " results");
  BRIOCHE_CHECK(resamples >= 100, "paired bootstrap: expected at least 100 resamples, got ", resamples);
  auto difference = [&](const std::vector<size_t>* picks) {
    int64_t a = 0, b = 0, units = 0;
    for (size_t j = 0; j < n; ++j) {
      const size_t i = picks ? (*picks)[j] : j;
      a += d.a_followed[i];
      b += d.b_followed[i];
      units += d.units[i];
    }
    return units ? double(b - a) / double(units) : 0.0;
  };
  BootstrapInterval out;
  out.difference = difference(nullptr);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  std::vector<double> diffs(resamples);
  std::vector<size_t> picks(n);
  for (int r = 0; r < resamples; ++r) {
    for (size_t& p : picks) p = pick(rng);
    diffs[r] = difference(&picks);
  }
  std::sort(diffs.begin(), diffs.end());
  const double tail = (1.0 - confidence) / 2.0;
  auto quantile = [&](double q) {  // linear interpolation between order statistics
    const double pos = q * (resamples - 1);
    const size_t lo = size_t(std::floor(pos));
    const size_t hi = std::min(lo + 1, size_t(resamples - 1));
    return diffs[lo] + (pos - double(lo)) * (diffs[hi] - diffs[lo]);
  };
  out.low = quantile(tail);
  out.high = quantile(1.0 - tail);
  return out;
}

}  // namespace brioche::eval
