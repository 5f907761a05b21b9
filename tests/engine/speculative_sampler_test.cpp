// The sampled rejection rule (Sampler::verify_draft): whatever the draft,
// the kept token must be distributed as sample() draws it. Checked with a
// chi-square goodness-of-fit test on a 6-token vocabulary against the exact
// processed distribution, at significance 0.001 (fixed seeds: the test is
// deterministic; a wrong rule, e.g. accepting drafts always or sampling the
// residual without removing the draft, fails it by orders of magnitude).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/rng.h"
#include "engine/sampler.h"

namespace brioche::engine {
namespace {

// The distribution sample() draws from: softmax(logits / temperature) over the top_k.
std::vector<double> target_distribution(const std::vector<float>& logits, float temperature, int top_k) {
  std::vector<float> sorted = logits;
  std::sort(sorted.rbegin(), sorted.rend());
  const float kth = sorted[size_t(top_k - 1)];
  std::vector<double> p(logits.size(), 0.0);
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] >= kth) z += p[i] = std::exp(double(logits[i]) / temperature);
  for (double& v : p) v /= z;
  return p;
}

// Pearson's chi-square of `counts` against `p` (cells with p > 0).
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n, int* cells) {
  double chi = 0;
  *cells = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0 but was drawn";
      continue;
    }
    const double expected = p[i] * n;
    chi += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++*cells;
  }
  return chi;
}

TEST(SpeculativeSampler, KeptTokensFollowTheTargetDistributionForEveryDraft) {
  const std::vector<float> logits = {1.0f, 2.5f, 0.2f, 1.8f, -1.0f, 2.2f};
  const float temperature = 0.9f;
  const int top_k = 5;  // token 4 is truncated away: a draft of it is always rejected
  const std::vector<double> p = target_distribution(logits, temperature, top_k);
  // Chi-square critical values at 0.001 for 1..5 degrees of freedom.
  const double critical[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52};
  const int n = 20000;
  for (int32_t draft = 0; draft < 6; ++draft) {
    Sampler sampler({.temperature = temperature, .top_k = top_k, .seed = 1234 + uint64_t(draft)}, 6);
    std::vector<int> counts(6, 0);
    int accepted = 0;
    for (int i = 0; i < n; ++i) {
      std::vector<float> row = logits;
      Sampler::Verdict v = sampler.verify_draft({.logits = row}, draft);
      ASSERT_GE(v.result.token, 0);
      ++counts[size_t(v.result.token)];
      if (v.accepted) {
        ++accepted;
        EXPECT_EQ(v.result.token, draft);
      } else {
        EXPECT_NE(v.result.token, draft) << "a rejected draft must not come back from the residual";
      }
    }
    int cells = 0;
    const double chi = chi_square(counts, p, n, &cells);
    EXPECT_LT(chi, critical[cells - 1]) << "draft " << draft << ": counts do not follow the target distribution";
    // The acceptance rate is p(draft) (binomial, 5 sigma).
    const double sigma = std::sqrt(n * p[size_t(draft)] * (1 - p[size_t(draft)])) + 1e-9;
    EXPECT_NEAR(accepted, n * p[size_t(draft)], 5 * sigma + 0.5) << "draft " << draft;
  }
}

// A draft model's rule: the draft is drawn from q (another distribution),
// kept with min(1, p/q), else the token comes from (p - q)+. The kept
// token must follow p, and the acceptance rate is sum_t min(p(t), q(t)).
TEST(SpeculativeSampler, DraftsDrawnFromAnotherDistributionKeepTheTargetDistribution) {
  const std::vector<float> logits = {1.0f, 2.5f, 0.2f, 1.8f, -1.0f, 2.2f};
  const float temperature = 0.9f;
  const int top_k = 5;  // token 4 truncated: q proposes it sometimes, p never keeps it
  const std::vector<double> p = target_distribution(logits, temperature, top_k);
  const std::vector<float> q = {0.05f, 0.1f, 0.3f, 0.2f, 0.15f, 0.2f};  // far from p on purpose
  double overlap = 0;
  for (size_t t = 0; t < p.size(); ++t) overlap += std::min(p[t], double(q[t]));
  Sampler sampler({.temperature = temperature, .top_k = top_k, .seed = 4242}, 6);
  SamplerRng draft_rng(99);
  const int n = 40000;
  std::vector<int> counts(6, 0);
  int accepted = 0;
  for (int i = 0; i < n; ++i) {
    // d ~ q by inverse CDF
    const double u = draft_rng.next_unit();
    int32_t draft = 5;
    double cumulative = 0;
    for (int32_t t = 0; t < 6; ++t) {
      cumulative += q[size_t(t)];
      if (u < cumulative) {
        draft = t;
        break;
      }
    }
    std::vector<float> row = logits;
    Sampler::Verdict v = sampler.verify_draft({.logits = row}, draft, q);
    ASSERT_GE(v.result.token, 0);
    ++counts[size_t(v.result.token)];
    if (v.accepted) {
      ++accepted;
      EXPECT_EQ(v.result.token, draft);
    }
  }
  int cells = 0;
  const double chi = chi_square(counts, p, n, &cells);
  ASSERT_EQ(cells, 5);
  EXPECT_LT(chi, 18.47) << "kept tokens do not follow the target distribution (chi-square, 4 df, 0.001)";
  const double sigma = std::sqrt(n * overlap * (1 - overlap));
  EXPECT_NEAR(accepted, n * overlap, 5 * sigma);
}

TEST(SpeculativeSampler, GreedyAcceptsExactlyTheArgmax) {
  Sampler sampler({.temperature = 0}, 4);
  std::vector<float> row = {0.5f, 3.0f, 1.0f, 3.0f};  // ties: the lowest id is the argmax
  Sampler::Verdict yes = sampler.verify_draft({.logits = row}, 1);
  EXPECT_TRUE(yes.accepted);
  EXPECT_EQ(yes.result.token, 1);
  row = {0.5f, 3.0f, 1.0f, 3.0f};
  Sampler::Verdict no = sampler.verify_draft({.logits = row}, 3);
  EXPECT_FALSE(no.accepted);
  EXPECT_EQ(no.result.token, 1);
}

TEST(SpeculativeSampler, ADraftTheMaskForbidsIsRejected) {
  Sampler sampler({.temperature = 1.0f, .seed = 7}, 4);
  const uint32_t mask = 0b0101;  // tokens 0 and 2
  for (int i = 0; i < 200; ++i) {
    std::vector<float> row = {0.0f, 5.0f, 0.0f, 0.0f};
    Sampler::Verdict v = sampler.verify_draft({.logits = row, .allowed_mask = &mask}, 1);
    EXPECT_FALSE(v.accepted);
    EXPECT_TRUE(v.result.token == 0 || v.result.token == 2) << v.result.token;
  }
}

}  // namespace
}  // namespace brioche::engine
