// Sampler behaviour: determinism, masks, penalties, ties, validation, and the
// fast top-k / top-p paths on a 262k vocabulary against a full-sort reference.
// GCC 12 warns about members left to their defaults in designated
// initializers, which is how these tests spell sampling parameters.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"

namespace brioche::engine {
namespace {

std::vector<float> random_logits(int vocab, float scale, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& l : logits) l = normal(gen);
  return logits;
}

std::vector<int32_t> generate(Sampler& sampler, const std::vector<float>& logits, int n) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    tokens.push_back(sampler.sample({.logits = row}).token);
  }
  return tokens;
}

TEST(Sampler, SameSeedSameTokens) {
  const auto logits = random_logits(5000, 2.0f, 1);
  const SamplingParams params{.temperature = 0.9f, .top_p = 0.95f, .seed = 77};
  Sampler a(params, 5000), b(params, 5000);
  const auto tokens_a = generate(a, logits, 64);
  EXPECT_EQ(tokens_a, generate(b, logits, 64));
  EXPECT_GT(std::set<int32_t>(tokens_a.begin(), tokens_a.end()).size(), 4u) << "should actually sample";

  SamplingParams other = params;
  other.seed = 78;
  Sampler c(other, 5000);
  EXPECT_NE(tokens_a, generate(c, logits, 64));
}

TEST(Sampler, UnseededSamplerSamples) {
  const auto logits = random_logits(100, 1.0f, 2);
  Sampler sampler(SamplingParams{}, 100);
  for (const int32_t t : generate(sampler, logits, 32)) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 100);
  }
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
  Sampler sampler({.temperature = 0.0f}, 5);
  const auto result = sampler.sample({.logits = logits});
  EXPECT_EQ(result.token, 1);
  EXPECT_TRUE(std::isnan(result.logprob)) << "logprobs were not requested";
  EXPECT_TRUE(result.top.empty());
}

std::vector<uint32_t> mask_of(int vocab, const std::vector<int32_t>& allowed) {
  std::vector<uint32_t> mask(size_t(vocab + 31) / 32, 0);
  for (const int32_t t : allowed) mask[size_t(t) / 32] |= uint32_t(1) << (t % 32);
  return mask;
}

TEST(Sampler, MaskAllowingOneTokenReturnsIt) {
  const int vocab = 1000;
  auto logits = random_logits(vocab, 3.0f, 3);
  const int32_t weakest = int32_t(std::min_element(logits.begin(), logits.end()) - logits.begin());
  const auto mask = mask_of(vocab, {weakest});
  for (const SamplingParams& params :
       {SamplingParams{.temperature = 0.0f}, SamplingParams{.temperature = 1.0f, .seed = 1},
        SamplingParams{.temperature = 0.3f, .top_k = 1, .top_p = 0.1f, .min_p = 0.9f, .seed = 2}}) {
    SamplingParams with_logprobs = params;
    with_logprobs.logprobs = true;
    Sampler sampler(with_logprobs, vocab);
    std::vector<float> row = logits;
    const auto result = sampler.sample({.logits = row, .allowed_mask = mask.data()});
    EXPECT_EQ(result.token, weakest);
    // The reported logprob is the model's (raw), not the masked distribution's 0.
    EXPECT_LT(result.logprob, -5.0f);
  }
}

TEST(Sampler, MaskedTokensAreNeverSampled) {
  const int vocab = 77;  // not a multiple of 32: bits past the vocab are ignored
  auto logits = random_logits(vocab, 1.0f, 4);
  std::vector<int32_t> allowed;
  for (int t = 0; t < vocab; t += 3) allowed.push_back(t);
  auto mask = mask_of(vocab, allowed);
  mask.back() |= ~((uint32_t(1) << (vocab % 32)) - 1);  // garbage past the vocab
  Sampler sampler({.temperature = 1.5f, .seed = 5}, vocab);
  std::set<int32_t> seen;
  for (int i = 0; i < 3000; ++i) {
    std::vector<float> row = logits;
    const int32_t t = sampler.sample({.logits = row, .allowed_mask = mask.data()}).token;
    ASSERT_EQ(t % 3, 0) << "sampled masked token " << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), allowed.size()) << "every allowed token should come up in 3000 draws";
}

TEST(Sampler, MaskAllowingNothingFails) {
  std::vector<float> logits(64, 0.0f);
  const std::vector<uint32_t> mask(2, 0);
  for (const float temperature : {0.0f, 1.0f}) {
    Sampler sampler({.temperature = temperature, .seed = 1}, 64);
    EXPECT_THROW(sampler.sample({.logits = logits, .allowed_mask = mask.data()}), Error);
  }
}

TEST(Sampler, RepetitionPenaltyCountsEachDistinctTokenOnceOverPromptAndOutput) {
  std::vector<float> logits = {2.0f, -2.0f, 2.0f, 1.0f};
  const std::vector<int32_t> prompt = {0, 0, 1};
  const std::vector<int32_t> output = {1, 0};
  Sampler sampler({.temperature = 0.0f, .repetition_penalty = 2.0f}, 4);
  sampler.sample({.logits = logits, .prompt = prompt, .output = output});
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.0f, 2.0f, 1.0f}));
}

TEST(Sampler, PresenceAndFrequencyPenaltiesSeeOnlyOutput) {
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<int32_t> prompt = {0, 0, 0};
  const std::vector<int32_t> output = {1, 2, 2, 2};
  Sampler sampler({.temperature = 0.0f,
                   .presence_penalty = 0.5f,
                   .frequency_penalty = 0.25f,
                   .logit_bias = {{3, -3.0f}, {0, 0.5f}}},
                  4);
  const auto result = sampler.sample({.logits = logits, .prompt = prompt, .output = output});
  EXPECT_EQ(logits, (std::vector<float>{1.5f, 0.25f, -0.25f, -2.0f}));
  EXPECT_EQ(result.token, 0);
}

TEST(Sampler, TopKKeepsTies) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 2.0f, 0.0f};
  Sampler sampler({.temperature = 1.0f, .top_k = 2, .seed = 1}, 5);
  sampler.sample({.logits = logits});
  EXPECT_TRUE(std::isinf(logits[0]) && std::isinf(logits[4]));
  EXPECT_EQ(logits[1], 3.0f);
  EXPECT_EQ(logits[2], 2.0f);
  EXPECT_EQ(logits[3], 2.0f);
}

TEST(Sampler, LogprobsAreRawLogSoftmax) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.125f)};
  Sampler sampler({.temperature = 0.0f, .logit_bias = {{3, 10.0f}}, .top_logprobs = 3}, 4);
  const auto result = sampler.sample({.logits = logits});
  EXPECT_EQ(result.token, 3);                          // chosen through the bias...
  EXPECT_NEAR(result.logprob, std::log(0.125), 1e-6);  // ...reported with the model's probability
  ASSERT_EQ(result.top.size(), 3u);
  EXPECT_EQ(result.top[0].first, 0);
  EXPECT_EQ(result.top[1].first, 1);
  EXPECT_EQ(result.top[2].first, 2);  // tie with 3: lower id first
  EXPECT_NEAR(result.top[0].second, std::log(0.5), 1e-6);
}

TEST(Sampler, RejectsBadInput) {
  EXPECT_THROW(Sampler({.temperature = -1.0f}, 10), Error);
  EXPECT_THROW(Sampler({.top_p = 1.5f}, 10), Error);
  EXPECT_THROW(Sampler({.min_p = -0.1f}, 10), Error);
  EXPECT_THROW(Sampler({.repetition_penalty = 0.0f}, 10), Error);
  EXPECT_THROW(Sampler({.logit_bias = {{10, 1.0f}}}, 10), Error);
  EXPECT_THROW(Sampler({.top_logprobs = 11}, 10), Error);
  EXPECT_THROW(Sampler({}, 0), Error);
  try {
    Sampler({.top_p = 2.0f}, 10);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top_p"), std::string::npos) << e.what();
  }

  Sampler sampler({.seed = 1}, 4);
  std::vector<float> wrong_size(5, 0.0f);
  EXPECT_THROW(sampler.sample({.logits = wrong_size}), Error);
  std::vector<float> with_nan = {0.0f, NAN, 1.0f, 2.0f};
  EXPECT_THROW(sampler.sample({.logits = with_nan}), Error);
  std::vector<float> ok(4, 0.0f);
  const std::vector<int32_t> bad_history = {7};
  Sampler penalized({.repetition_penalty = 1.1f, .seed = 1}, 4);
  EXPECT_THROW(penalized.sample({.logits = ok, .prompt = bad_history}), Error);
}

// Straightforward reference for steps 6-8: sort every token, walk the
// nucleus with exact weights (std::exp, double sums in rank order), and
// derive the kept set; the sampler's partial selections must give the same
// set on a 262k vocabulary. The sampler weighs tokens with a vector exp
// (~2e-7 relative error) and sums them in another order, so where the mass
// before a token is within 4e-6 of the top-p target (relative to the total;
// the sampler's float block sums of 32 terms per lane stay within ~2e-6)
// the nucleus may end one token earlier or later: such a boundary tie
// admits both kept sets, and any other difference is a mismatch.
std::vector<std::vector<bool>> reference_kept(std::vector<float> scaled, int top_k, float top_p, float min_p) {
  const size_t vocab = scaled.size();
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return scaled[size_t(a)] > scaled[size_t(b)] || (scaled[size_t(a)] == scaled[size_t(b)] && a < b);
  });
  const float max_logit = scaled[size_t(order[0])];
  float top_k_bound = -INFINITY;
  if (top_k > 0 && size_t(top_k) < vocab) top_k_bound = scaled[size_t(order[size_t(top_k) - 1])];
  double mass = 0;
  for (size_t i = 0; i < vocab; ++i) {
    if (scaled[i] >= top_k_bound) mass += std::exp(double(scaled[i]) - double(max_logit));
  }
  const double target = double(top_p) * mass;
  // top_p 0 keeps exactly the best token: no mass is compared with 0 loosely.
  const double tie = top_p > 0.0f ? 4e-6 * mass : -1.0;
  // Nucleus sizes: the exact one first, then those a boundary tie allows.
  std::vector<size_t> nucleus_sizes;
  double above = 0;
  size_t j = 0;
  for (; j < vocab && scaled[size_t(order[j])] >= top_k_bound; ++j) {
    if (j > 0 && above >= target) break;
    if (j > 0 && std::abs(above - target) <= tie) nucleus_sizes.push_back(j);  // could have stopped here
    above += std::exp(double(scaled[size_t(order[j])]) - double(max_logit));
  }
  nucleus_sizes.insert(nucleus_sizes.begin(), j);
  if (j < vocab && std::abs(above - target) <= tie) nucleus_sizes.push_back(j + 1);  // could have gone on

  std::vector<std::vector<bool>> kept_sets;
  for (const size_t size : nucleus_sizes) {
    float bound = top_k_bound;
    if (top_p < 1.0f) bound = std::max(bound, scaled[size_t(order[size - 1])]);
    if (min_p > 0) bound = std::max(bound, max_logit + std::log(min_p));
    std::vector<bool> kept(vocab);
    for (size_t i = 0; i < vocab; ++i) kept[i] = scaled[i] >= bound;
    kept_sets.push_back(std::move(kept));
  }
  return kept_sets;
}

TEST(Sampler, LargeVocabularyMatchesFullSortReference) {
  const int vocab = 262144;
  struct Case {
    float scale, temperature, top_p, min_p;
    int top_k;
  };
  for (const Case& c : {Case{0.3f, 1.0f, 0.9f, 0.0f, 0},     // flat: nucleus of ~200k tokens
                        Case{1.0f, 1.0f, 0.5f, 0.0f, 0},     // nucleus of thousands: several growths
                        Case{4.0f, 0.7f, 0.95f, 0.0f, 0},    // peaked: first selection suffices
                        Case{1.0f, 1.2f, 0.8f, 0.0f, 5000},  // top-k, then top-p
                        Case{2.0f, 1.0f, 1.0f, 0.01f, 40}, Case{2.0f, 0.8f, 0.0f, 0.0f, 0},
                        Case{0.3f, 1.0f, 0.99999f, 0.0f, 0},   // nucleus past every weight level: the full walk
                        Case{3.0f, 1.0f, 1.0f, 0.0f, 200000},  // top-k deep in the flat tail
                        Case{3.0f, 0.5f, 1.0f, 0.2f, 3}}) {    // min-p tighter than top-k

    SCOPED_TRACE(testing::Message() << "scale " << c.scale << " top_p " << c.top_p << " top_k " << c.top_k);
    const auto logits = random_logits(vocab, c.scale, 11);
    std::vector<float> scaled = logits;
    for (float& l : scaled) l = l / c.temperature;
    const auto acceptable = reference_kept(scaled, c.top_k, c.top_p, c.min_p);

    Sampler sampler({.temperature = c.temperature, .top_k = c.top_k, .top_p = c.top_p, .min_p = c.min_p, .seed = 3},
                    vocab);
    std::vector<float> row = logits;
    const int32_t token = sampler.sample({.logits = row}).token;
    size_t best_mismatches = SIZE_MAX, kept = 0;
    for (const std::vector<bool>& want : acceptable) {
      size_t mismatches = 0;
      kept = 0;
      for (size_t i = 0; i < size_t(vocab); ++i) {
        const bool got = !std::isinf(row[i]);
        mismatches += got != want[i];
        kept += got;
        if (got) mismatches += row[i] != scaled[i];
      }
      best_mismatches = std::min(best_mismatches, mismatches);
    }
    EXPECT_EQ(best_mismatches, 0u) << "kept " << kept << ", acceptable sets " << acceptable.size();
    EXPECT_FALSE(std::isinf(row[size_t(token)]));
  }
}

}  // namespace
}  // namespace brioche::engine
