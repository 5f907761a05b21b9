// Sampler against goldens from HF transformers' logits processors
// (tools/oracle/sampler_goldens.py): processed logits, kept sets, raw
// logprobs, RNG reference outputs, and a chi-square check that draws follow
// the processed distribution.
// GCC 12 warns about members left to their defaults in designated
// initializers, which is how these tests spell sampling parameters.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/rng.h"
#include "engine/sampler.h"

namespace brioche::engine {
namespace {

using nlohmann::json;

const json& golden() {
  static const json data = [] {
    const std::string path = std::string(BRIOCHE_SOURCE_DIR) + "/tests/engine/golden/sampler_processors.json";
    std::ifstream in(path);
    EXPECT_TRUE(in) << "cannot open " << path;
    std::stringstream text;
    text << in.rdbuf();
    return json::parse(text.str());
  }();
  return data;
}

std::vector<float> decode_f32(const std::string& b64) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : 63;
  };
  std::vector<uint8_t> bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (const char c : b64) {
    if (c == '=') break;
    acc = (acc << 6) | uint32_t(value(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(uint8_t(acc >> bits));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

SamplingParams params_from(const json& p, uint64_t seed) {
  SamplingParams params;
  params.temperature = p["temperature"];
  params.top_k = p["top_k"];
  params.top_p = p["top_p"];
  params.min_p = p["min_p"];
  params.repetition_penalty = p["repetition_penalty"];
  params.presence_penalty = p["presence_penalty"];
  params.frequency_penalty = p["frequency_penalty"];
  for (const auto& bias : p["logit_bias"]) params.logit_bias.emplace_back(bias[0], bias[1]);
  params.seed = seed;
  params.logprobs = true;
  params.top_logprobs = 5;
  return params;
}

struct GoldenCase {
  std::string name;
  int vocab;
  SamplingParams params;
  std::vector<int32_t> prompt, output;
  std::vector<uint32_t> mask;  // empty: no mask
  std::vector<float> logits, processed;
};

GoldenCase load_case(const json& c) {
  GoldenCase g;
  g.name = c["name"];
  g.vocab = c["vocab"];
  g.params = params_from(c["params"], 1234);
  g.prompt = c["prompt"].get<std::vector<int32_t>>();
  g.output = c["output"].get<std::vector<int32_t>>();
  if (!c["mask"].is_null()) {
    for (const auto& word : c["mask"]) g.mask.push_back(uint32_t(word.get<uint64_t>()));
  }
  g.logits = decode_f32(c["logits"]);
  g.processed = decode_f32(c["processed"]);
  return g;
}

TEST(SamplerGolden, RecordsItsOracle) {
  EXPECT_EQ(golden()["generator"], "tools/oracle/sampler_goldens.py");
  EXPECT_FALSE(golden()["transformers"].get<std::string>().empty());
  EXPECT_EQ(golden()["cases"].size(), 32u);
}

TEST(SamplerGolden, ProcessedLogitsMatchTransformers) {
  for (const json& c : golden()["cases"]) {
    const GoldenCase g = load_case(c);
    SCOPED_TRACE(g.name);
    ASSERT_EQ(int(g.logits.size()), g.vocab);
    ASSERT_EQ(int(g.processed.size()), g.vocab);
    Sampler sampler(g.params, g.vocab);
    std::vector<float> logits = g.logits;
    const Sampler::Result result = sampler.sample({.logits = logits,
                                                   .prompt = g.prompt,
                                                   .output = g.output,
                                                   .allowed_mask = g.mask.empty() ? nullptr : g.mask.data()});
    int kept = 0, mismatches = 0;
    for (int t = 0; t < g.vocab; ++t) {
      const float want = g.processed[size_t(t)], got = logits[size_t(t)];
      if (std::isinf(want)) {
        mismatches += !(std::isinf(got) && got < 0);
      } else {
        ++kept;
        mismatches += !(std::abs(got - want) <= 1e-5f * std::max(1.0f, std::abs(want)));
      }
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(kept, c["kept"].get<int>());
    ASSERT_GE(result.token, 0);
    ASSERT_LT(result.token, g.vocab);
    EXPECT_TRUE(std::isfinite(g.processed[size_t(result.token)])) << "sampled a token the oracle removed";
    if (c.contains("greedy_token")) {
      EXPECT_EQ(result.token, c["greedy_token"].get<int>());
      EXPECT_NEAR(result.logprob, c["greedy_raw_logprob"].get<double>(), 1e-5);
    }
    // Raw logprobs: torch.log_softmax of the unprocessed logits.
    const json& top = c["raw_top5"];
    ASSERT_EQ(result.top.size(), top.size());
    for (size_t i = 0; i < top.size(); ++i) {
      EXPECT_EQ(result.top[i].first, top[i][0].get<int>());
      EXPECT_NEAR(result.top[i].second, top[i][1].get<double>(), 1e-5);
    }
  }
}

TEST(SamplerGolden, RngMatchesReferenceXoshiro) {
  for (const json& r : golden()["rng"]) {
    SamplerRng rng(r["seed"].get<uint64_t>());
    for (const auto& want : r["u64"]) EXPECT_EQ(rng.next_u64(), std::stoull(want.get<std::string>()));
  }
}

// Draws follow softmax(processed logits): chi-square over the kept tokens
// (bins with expected count < 5 merged). Seeded, so the statistic is a fixed
// number; the bound is ~7 standard deviations above its mean (df).
TEST(SamplerGolden, DrawsFollowProcessedDistribution) {
  for (const char* name : {"v1000_top_p", "v17_penalties", "v1000_bias_mask", "v6000_min_p"}) {
    SCOPED_TRACE(name);
    const json* found = nullptr;
    for (const json& c : golden()["cases"]) {
      if (c["name"] == name) found = &c;
    }
    ASSERT_NE(found, nullptr);
    const GoldenCase g = load_case(*found);
    SamplingParams params = g.params;
    params.logprobs = false;
    params.top_logprobs = 0;
    Sampler sampler(params, g.vocab);

    double max_logit = -INFINITY;
    for (const float l : g.processed) max_logit = std::max(max_logit, double(l));
    std::vector<double> prob(size_t(g.vocab));
    double total = 0;
    for (int t = 0; t < g.vocab; ++t) total += prob[size_t(t)] = std::exp(double(g.processed[size_t(t)]) - max_logit);
    for (double& p : prob) p /= total;

    const int draws = 20000;
    std::vector<int> counts(size_t(g.vocab), 0);
    std::vector<float> logits;
    for (int i = 0; i < draws; ++i) {
      logits = g.logits;
      const int32_t token = sampler
                                .sample({.logits = logits,
                                         .prompt = g.prompt,
                                         .output = g.output,
                                         .allowed_mask = g.mask.empty() ? nullptr : g.mask.data()})
                                .token;
      ++counts[size_t(token)];
    }
    double chi2 = 0, small_expected = 0, small_observed = 0;
    int bins = 0;
    for (int t = 0; t < g.vocab; ++t) {
      const double expected = prob[size_t(t)] * draws;
      if (expected == 0) {
        EXPECT_EQ(counts[size_t(t)], 0) << "token " << t << " was removed but sampled";
      } else if (expected < 5) {
        small_expected += expected;
        small_observed += counts[size_t(t)];
      } else {
        chi2 += (counts[size_t(t)] - expected) * (counts[size_t(t)] - expected) / expected;
        ++bins;
      }
    }
    if (small_expected > 0) {
      chi2 += (small_observed - small_expected) * (small_observed - small_expected) / small_expected;
      ++bins;
    }
    const double df = std::max(1, bins - 1);
    EXPECT_LT(chi2, df + 7 * std::sqrt(2 * df)) << "bins " << bins;
  }
}

}  // namespace
}  // namespace brioche::engine
