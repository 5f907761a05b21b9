#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "engine/rng.h"

namespace brioche::eval {

namespace {

double nll_of(std::span<const RowLogps> rows, const std::vector<size_t>* picks) {
  double sum = 0;
  int64_t tokens = 0;
  for (size_t j = 0; j < rows.size(); ++j) {
    const RowLogps& r = rows[picks ? (*picks)[j] : j];
    sum += r.logp_sum, tokens += r.tokens;
  }
  return tokens > 0 ? -sum / double(tokens) : 0.0;
}

// The 2.5th and 97.5th percentiles (linear between order statistics) of
// statistic(picks) over row resamples.
template <typename Statistic>
MeanInterval bootstrap(size_t n, double estimate, Statistic statistic) {
  engine::SamplerRng rng(kPerplexitySeed);
  std::vector<double> values(kPerplexityResamples);
  std::vector<size_t> picks(n);
  for (double& v : values) {
    for (size_t& p : picks) p = size_t(rng.next_u64() % n);
    v = statistic(&picks);
  }
  std::sort(values.begin(), values.end());
  auto quantile = [&](double q) {
    const double pos = q * double(values.size() - 1);
    const size_t lo = size_t(pos), hi = std::min(lo + 1, values.size() - 1);
    return values[lo] + (pos - double(lo)) * (values[hi] - values[lo]);
  };
  return {estimate, quantile(0.025), quantile(0.975)};
}

}  // namespace

PerplexitySummary summarize_perplexity(std::span<const RowLogps> rows) {
  PerplexitySummary s;
  s.rows = int64_t(rows.size());
  for (const RowLogps& r : rows) s.tokens += r.tokens;
  BRIOCHE_CHECK(s.tokens > 0, "perplexity: no scored tokens in ", rows.size(), " rows");
  s.nll = bootstrap(rows.size(), nll_of(rows, nullptr), [&](const std::vector<size_t>* p) { return nll_of(rows, p); });
  s.perplexity = {std::exp(s.nll.mean), std::exp(s.nll.low), std::exp(s.nll.high)};
  return s;
}

MeanInterval compare_perplexity(std::span<const RowLogps> base, std::span<const RowLogps> other) {
  BRIOCHE_CHECK(base.size() == other.size() && !base.empty(), "perplexity comparison: ", base.size(), " and ",
                other.size(), " rows (expected the same rows, at least one)");
  auto diff = [&](const std::vector<size_t>* p) { return nll_of(other, p) - nll_of(base, p); };
  return bootstrap(base.size(), diff(nullptr), diff);
}

nlohmann::ordered_json PerplexitySummary::to_json() const {
  return {{"rows", rows},
          {"tokens", tokens},
          {"nll", {{"mean", nll.mean}, {"low", nll.low}, {"high", nll.high}}},
          {"perplexity", {{"mean", perplexity.mean}, {"low", perplexity.low}, {"high", perplexity.high}}}};
}

}  // namespace brioche::eval
