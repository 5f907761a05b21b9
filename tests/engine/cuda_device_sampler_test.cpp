// Device sampling (engine/device_sampler.h, backend/cuda/sampling.cu)
// against the host Sampler on the same logits, with the same u (both
// Samplers seeded alike: the device one's draw_unit() is the host's draw).
//
// What must agree, and within what:
//   * greedy: the same token (first maximum), always;
//   * sampled rows: the same token, except near a boundary: the host weighs
//     tokens with a vector exp (~2e-7 relative) and sums in float blocks, the
//     device with exp in double rounded to float and double sums, so where
//     u * mass lies within 1e-4 (relative) of a cumulative boundary of the
//     device's token the draw may land on the neighbour, and where the top-p
//     walk's mass_before ~ top_p * mass the device may keep the next token
//     below the host's cut. Such rows are counted: at most 2 + 2%;
//   * logprob and top_logprobs: the same ids in the same order (ties to the
//     lower id), values within 1e-5 (both sides: log Z in double, one float
//     rounding at the end).
// An engine-level test runs a small random model on the GPU with device
// sampling and with BRIOCHE_CUDA_SAMPLING=0: the same tokens.
// Without a GPU every test reports "skipped: no CUDA device".
#include <gtest/gtest.h>

#if BRIOCHE_CUDA

#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "../../tools/gen_model_lib.h"
#include "engine/device_sampler.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/device_weights.h"
#include "model/llama.h"
#include "ops/device.h"
#include "toy_model.h"
#include "require_cuda.h"

namespace brioche::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A device copy of host floats [rows, cols].
Tensor upload(const std::vector<float>& data, int64_t rows, int64_t cols) {
  Tensor view = Tensor::view(const_cast<float*>(data.data()), DType::F32, {rows, cols}, nullptr);
  return ops::to_device(view, Device::CUDA);
}

struct Case {
  SamplingParams params;
  std::vector<float> logits;  // [vocab]
  std::vector<int32_t> prompt, output;
  std::vector<uint32_t> mask;  // [ceil(vocab / 32)] or empty
};

template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  return *(values.begin() + std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng));
}

Case random_case(std::mt19937_64& rng, int vocab) {
  Case c;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  SamplingParams& p = c.params;
  p.temperature = unit(rng) < 0.25 ? 0.0f : pick(rng, {0.3f, 0.7f, 1.0f, 1.5f});
  p.top_k = pick(rng, {0, 0, 1, 7, 50, vocab - 1, vocab + 5});
  p.top_p = pick(rng, {1.0f, 1.0f, 0.95f, 0.5f, 0.1f, 0.0f});
  p.min_p = pick(rng, {0.0f, 0.0f, 0.02f, 0.3f});
  p.repetition_penalty = pick(rng, {1.0f, 1.0f, 1.3f, 0.8f});
  p.presence_penalty = pick(rng, {0.0f, 0.5f, -0.3f});
  p.frequency_penalty = pick(rng, {0.0f, 0.2f});
  std::uniform_int_distribution<int32_t> token(0, vocab - 1), small(0, std::min(vocab, 200) - 1);
  if (unit(rng) < 0.3) {
    const int32_t repeated = token(rng);
    p.logit_bias = {
        {repeated, 1.5f}, {token(rng), 8.0f}, {token(rng), -100.0f}, {repeated, -0.25f}, {token(rng), 0.75f}};
  }
  p.seed = rng();
  if (unit(rng) < 0.4) {
    p.logprobs = true;
    p.top_logprobs = pick(rng, {0, 1, 5, 20, 32});
  }

  const float scale = pick(rng, {1.0f, 3.0f, 8.0f});
  const bool ties = unit(rng) < 0.3;  // values on a 0.5 grid: many equal logits
  const bool some_neg_inf = unit(rng) < 0.2;
  std::normal_distribution<float> normal(0.0f, scale);
  c.logits.resize(size_t(vocab));
  for (float& l : c.logits) {
    l = normal(rng);
    if (ties) l = std::round(l * 2.0f) / 2.0f;
    if (some_neg_inf && unit(rng) < 0.1) l = kNegInf;
  }
  for (int i = 0; i < 30; ++i) c.prompt.push_back(unit(rng) < 0.5 ? small(rng) : token(rng));
  for (int i = 0; i < 20; ++i) c.output.push_back(unit(rng) < 0.7 ? small(rng) : token(rng));

  if (unit(rng) < 0.3) {
    const double density = pick(rng, {0.5, 0.01});
    c.mask.assign((size_t(vocab) + 31) / 32, 0u);
    for (int t = 0; t < vocab; ++t)
      if (unit(rng) < density) c.mask[size_t(t) / 32] |= 1u << (t % 32);
    const int32_t always = small(rng);  // at least one allowed token with a finite logit
    c.mask[size_t(always) / 32] |= 1u << (always % 32);
    if (c.logits[size_t(always)] == kNegInf) c.logits[size_t(always)] = 0.0f;
  }
  return c;
}

SamplerRow host_row(Case& c, std::vector<float>& logits) {
  return {.logits = std::span<float>(logits),
          .prompt = c.prompt,
          .output = c.output,
          .allowed_mask = c.mask.empty() ? nullptr : c.mask.data()};
}

// Distance (relative to the kept mass) from u * mass to the nearest edge of
// `token`'s interval in the host's inverse CDF over its processed logits.
double boundary_distance(const std::vector<float>& processed, int32_t token, double u) {
  float max_logit = kNegInf;
  for (const float l : processed) max_logit = std::max(max_logit, l);
  double mass = 0.0, before = 0.0, after = 0.0;
  for (size_t i = 0; i < processed.size(); ++i) {
    if (processed[i] == kNegInf) continue;
    const double w = std::exp(double(processed[i] - max_logit));
    if (int32_t(i) == token) before = mass;
    mass += w;
    if (int32_t(i) == token) after = mass;
  }
  const double target = u * mass;
  return std::min(std::abs(before - target), std::abs(after - target)) / mass;
}

void check_against_host(int vocab, int n_rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Case> cases;
  for (int r = 0; r < n_rows; ++r) cases.push_back(random_case(rng, vocab));

  std::vector<float> all;  // [n_rows, vocab]
  for (const Case& c : cases) all.insert(all.end(), c.logits.begin(), c.logits.end());
  Tensor logits = upload(all, n_rows, vocab);

  std::vector<std::unique_ptr<Sampler>> device_samplers;
  std::vector<DeviceSampler::Row> rows;
  for (int r = 0; r < n_rows; ++r) {
    Case& c = cases[size_t(r)];
    device_samplers.push_back(std::make_unique<Sampler>(c.params, vocab));
    rows.push_back({.sampler = device_samplers.back().get(),
                    .logit_row = r,
                    .prompt = c.prompt,
                    .output = c.output,
                    .allowed_mask = c.mask.empty() ? nullptr : c.mask.data()});
  }
  DeviceSampler device(vocab);
  std::vector<Sampler::Result> got = device.sample(logits, rows);
  ASSERT_EQ(got.size(), size_t(n_rows));

  int boundary_rows = 0;
  for (int r = 0; r < n_rows; ++r) {
    Case& c = cases[size_t(r)];
    Sampler host(c.params, vocab), probe(c.params, vocab);
    std::vector<float> processed = c.logits;
    const Sampler::Result want = host.sample(host_row(c, processed));
    const Sampler::Result& d = got[size_t(r)];
    const std::string where = "vocab " + std::to_string(vocab) + " row " + std::to_string(r) + " (T " +
                              std::to_string(c.params.temperature) + ", top_k " + std::to_string(c.params.top_k) +
                              ", top_p " + std::to_string(c.params.top_p) + ", min_p " +
                              std::to_string(c.params.min_p) + ")";
    if (host.is_greedy()) {
      EXPECT_EQ(d.token, want.token) << where;
    } else if (d.token != want.token) {
      ASSERT_GE(d.token, 0) << where;
      ASSERT_LT(d.token, vocab) << where;
      ++boundary_rows;
      if (processed[size_t(d.token)] == kNegInf) {
        // Only the top-p cut compares masses: the device may keep the next
        // token below the host's cut when mass_before ~ top_p * mass.
        ASSERT_LT(c.params.top_p, 1.0f) << where << ": the device drew token " << d.token << ", truncated by the host";
        SamplingParams untruncated = c.params;
        untruncated.top_k = 0;
        untruncated.top_p = 1.0f;
        untruncated.min_p = 0.0f;
        std::vector<float> full = c.logits;
        Sampler(untruncated, vocab).sample(host_row(c, full));
        float host_bound = std::numeric_limits<float>::infinity();
        for (const float l : processed)
          if (l != kNegInf) host_bound = std::min(host_bound, l);
        const float v = full[size_t(d.token)];
        bool next_below_cut = v != kNegInf && v < host_bound;
        for (const float l : full)
          if (l > v && l < host_bound) next_below_cut = false;
        EXPECT_TRUE(next_below_cut) << where << ": the device drew token " << d.token << " (" << v
                                    << "), not next below the host's top-p cut " << host_bound;
        continue;
      }
      EXPECT_LT(boundary_distance(processed, d.token, probe.draw_unit()), 1e-4)
          << where << ": device " << d.token << ", host " << want.token;
    }
    if (c.params.logprobs || c.params.top_logprobs > 0) {
      EXPECT_NEAR(d.logprob, want.logprob, 1e-5) << where;
      ASSERT_EQ(d.top.size(), want.top.size()) << where;
      for (size_t k = 0; k < want.top.size(); ++k) {
        EXPECT_EQ(d.top[k].first, want.top[k].first) << where << " alternative " << k;
        EXPECT_NEAR(d.top[k].second, want.top[k].second, 1e-5) << where << " alternative " << k;
      }
    } else {
      EXPECT_TRUE(std::isnan(d.logprob)) << where;
      EXPECT_TRUE(d.top.empty()) << where;
    }
  }
  EXPECT_LE(boundary_rows, 2 + n_rows / 50) << "rows drawn across a cumulative boundary";
}

TEST(CudaDeviceSampler, MatchesHostSmallVocab) {
  REQUIRE_CUDA_DEVICE();
  check_against_host(1003, 400, 1);  // fewer tokens than threads in a CTA
}

TEST(CudaDeviceSampler, MatchesHostSmolLM2Vocab) {
  REQUIRE_CUDA_DEVICE();
  check_against_host(49152, 200, 2);
}

TEST(CudaDeviceSampler, MatchesHostQwenVocab) {
  REQUIRE_CUDA_DEVICE();
  check_against_host(151936, 64, 3);
}

// Few rows: a row is sampled by a cluster of CTAs, each taking a slice of the
// vocabulary. One row gets 8 (the most) and a batch of 16 more than one (how
// many depends on how the GPU's SMs split into GPCs); at vocab 100, 8 CTAs
// leave the last four of a row without tokens.
TEST(CudaDeviceSampler, MatchesHostWithSeveralCtasPerRow) {
  REQUIRE_CUDA_DEVICE();
  ASSERT_EQ(cuda::sample_ctas_per_row(1), 8);
  ASSERT_GT(cuda::sample_ctas_per_row(16), 1);
  for (uint64_t seed = 20; seed < 36; ++seed) check_against_host(100, 1, seed);
  check_against_host(1003, 16, 12);
  check_against_host(49152, 16, 13);
  for (uint64_t seed = 40; seed < 44; ++seed) check_against_host(151936, 1, seed);
}

// A seeded row draws from its own stream: alone or among other rows, the
// same tokens step after step.
TEST(CudaDeviceSampler, SeededRowAloneEqualsBatched) {
  REQUIRE_CUDA_DEVICE();
  const int vocab = 4099;
  std::mt19937_64 rng(9);
  SamplingParams params{.temperature = 0.9f, .top_k = 40, .top_p = 0.9f, .seed = 1234};
  Sampler alone_sampler(params, vocab), batched_sampler(params, vocab);
  DeviceSampler device(vocab);
  std::vector<std::unique_ptr<Sampler>> others;
  for (int i = 0; i < 9; ++i) {
    SamplingParams other{.temperature = 1.0f, .top_p = 0.8f, .seed = uint64_t(i)};
    others.push_back(std::make_unique<Sampler>(other, vocab));
  }
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<int32_t> alone_tokens, batched_tokens;
  for (int step = 0; step < 16; ++step) {
    std::vector<float> data(size_t(vocab) * 10);
    for (float& l : data) l = normal(rng);
    Tensor logits = upload(data, 10, vocab);
    // Alone: row 4 of the tensor; batched: the same row among nine others.
    std::vector<DeviceSampler::Row> alone{{.sampler = &alone_sampler, .logit_row = 4}};
    alone_tokens.push_back(device.sample(logits, alone)[0].token);
    std::vector<DeviceSampler::Row> batched;
    for (int r = 0; r < 10; ++r) {
      batched.push_back(
          {.sampler = r == 4 ? &batched_sampler : others[size_t(r < 4 ? r : r - 1)].get(), .logit_row = r});
    }
    batched_tokens.push_back(device.sample(logits, batched)[4].token);
  }
  EXPECT_EQ(alone_tokens, batched_tokens);
}

// Greedy rows with nothing that changes their logits take a kernel of one
// CTA a row (cuda::plain_greedy): the host's first maximum, ties and -inf
// included, at every vocabulary size, alone and batched; a NaN or a row of
// -inf fails like the host.
TEST(CudaDeviceSampler, PlainGreedyRowsTakeTheOneCtaKernel) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(77);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (const int vocab : {100, 1003, 49152, 151936}) {
    for (const int n_rows : {1, 16}) {
      std::vector<float> data(size_t(vocab) * size_t(n_rows));
      for (size_t r = 0; r < size_t(n_rows); ++r) {
        const bool ties = r % 2 == 0;  // values on a 0.5 grid: the maximum repeats
        for (size_t t = 0; t < size_t(vocab); ++t) {
          float l = normal(rng);
          if (ties) l = std::round(l);
          if (unit(rng) < 0.05) l = kNegInf;
          data[r * size_t(vocab) + t] = l;
        }
      }
      Tensor logits = upload(data, n_rows, vocab);
      Sampler greedy({.temperature = 0.0f}, vocab);
      std::vector<DeviceSampler::Row> rows;
      for (int r = 0; r < n_rows; ++r) rows.push_back({.sampler = &greedy, .logit_row = n_rows - 1 - r});
      DeviceSampler device(vocab);
      ASSERT_TRUE(cuda::plain_greedy(device.prepare(rows)));
      const std::vector<Sampler::Result> got = device.sample(logits, rows);
      for (int r = 0; r < n_rows; ++r) {
        std::vector<float> row(data.begin() + ptrdiff_t(rows[size_t(r)].logit_row) * vocab,
                               data.begin() + ptrdiff_t(rows[size_t(r)].logit_row + 1) * vocab);
        const int32_t want = greedy.sample({.logits = std::span<float>(row)}).token;
        EXPECT_EQ(got[size_t(r)].token, want) << "vocab " << vocab << " row " << r;
        EXPECT_TRUE(std::isnan(got[size_t(r)].logprob));
        EXPECT_TRUE(got[size_t(r)].top.empty());
      }
      const Tensor ids = ops::to_device(device.tokens(), Device::CPU);
      for (int r = 0; r < n_rows; ++r) EXPECT_EQ(ids.data_as<int32_t>()[r], got[size_t(r)].token);
    }
  }
  // Failures: the first NaN's index, and a row with no finite logit.
  const int vocab = 5000;
  Sampler greedy({.temperature = 0.0f}, vocab);
  DeviceSampler device(vocab);
  std::vector<DeviceSampler::Row> rows{{.sampler = &greedy, .logit_row = 0}};
  std::vector<float> data(size_t(vocab), 1.0f);
  data[4321] = std::numeric_limits<float>::quiet_NaN();
  data[4500] = std::numeric_limits<float>::infinity();
  try {
    device.sample(upload(data, 1, vocab), rows);
    ADD_FAILURE() << "a NaN logit was sampled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at token 4321"), std::string::npos) << e.what();
  }
  std::fill(data.begin(), data.end(), kNegInf);
  try {
    device.sample(upload(data, 1, vocab), rows);
    ADD_FAILURE() << "a row of -inf was sampled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no token is allowed"), std::string::npos) << e.what();
  }
  // Anything more than greedy takes the full pipeline.
  Sampler with_logprobs({.temperature = 0.0f, .logprobs = true}, vocab);
  std::vector<DeviceSampler::Row> other{{.sampler = &with_logprobs, .logit_row = 0}};
  EXPECT_FALSE(cuda::plain_greedy(device.prepare(other)));
}

TEST(CudaDeviceSampler, ErrorsLikeTheHost) {
  REQUIRE_CUDA_DEVICE();
  const int vocab = 300;
  std::vector<float> data(size_t(vocab), 0.5f);
  data[17] = std::numeric_limits<float>::quiet_NaN();
  Sampler sampler({.temperature = 0.0f}, vocab);
  DeviceSampler device(vocab);
  Tensor bad = upload(data, 1, vocab);
  std::vector<DeviceSampler::Row> rows{{.sampler = &sampler, .logit_row = 0}};
  try {
    device.sample(bad, rows);
    ADD_FAILURE() << "a NaN logit was sampled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at token 17"), std::string::npos) << e.what();
  }
  data[17] = 0.5f;
  Tensor good = upload(data, 1, vocab);
  std::vector<uint32_t> nothing((vocab + 31) / 32, 0u);
  rows[0].allowed_mask = nothing.data();
  try {
    device.sample(good, rows);
    ADD_FAILURE() << "a row whose mask allows nothing was sampled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no token is allowed"), std::string::npos) << e.what();
  }
}

// More alternatives than the device reports: that row comes back to the host.
TEST(CudaDeviceSampler, ManyTopLogprobsFallBackToTheHost) {
  REQUIRE_CUDA_DEVICE();
  const int vocab = 2000;
  std::mt19937_64 rng(4);
  Case c = random_case(rng, vocab);
  c.params.logprobs = true;
  c.params.top_logprobs = 50;
  Sampler host(c.params, vocab), on_device(c.params, vocab);
  std::vector<float> processed = c.logits;
  const Sampler::Result want = host.sample(host_row(c, processed));
  Tensor logits = upload(c.logits, 1, vocab);
  DeviceSampler device(vocab);
  std::vector<DeviceSampler::Row> rows{{.sampler = &on_device,
                                        .logit_row = 0,
                                        .prompt = c.prompt,
                                        .output = c.output,
                                        .allowed_mask = c.mask.empty() ? nullptr : c.mask.data()}};
  const Sampler::Result got = device.sample(logits, rows)[0];
  EXPECT_EQ(got.token, want.token);
  EXPECT_EQ(got.top, want.top);
}

// The engine on a small random model on the GPU: device sampling and host
// sampling (BRIOCHE_CUDA_SAMPLING=0) give the same tokens and logprobs for
// greedy, seeded, penalized and forked requests submitted together.
std::vector<GenerationRequest> engine_requests() {
  std::vector<GenerationRequest> out;
  auto base = [](std::vector<int32_t> prompt) {
    GenerationRequest r;
    r.prompt_tokens = std::move(prompt);
    r.max_tokens = 24;
    r.ignore_eos = true;
    return r;
  };
  GenerationRequest greedy = base({1, 2, 3, 4, 5});
  greedy.sampling.temperature = 0.0f;
  out.push_back(greedy);
  GenerationRequest seeded = base({9, 8, 7});
  seeded.sampling = {.temperature = 0.8f, .top_k = 50, .top_p = 0.9f, .seed = 11};
  out.push_back(seeded);
  GenerationRequest penalized = base({5, 5, 6, 7, 5, 100, 200});
  penalized.sampling = {.temperature = 1.0f,
                        .min_p = 0.05f,
                        .repetition_penalty = 1.2f,
                        .presence_penalty = 0.3f,
                        .frequency_penalty = 0.1f,
                        .logit_bias = {{5, 2.0f}, {42, -3.0f}},
                        .seed = 12};
  penalized.top_logprobs = 3;
  out.push_back(penalized);
  GenerationRequest forked = base({300, 301, 302, 303});
  forked.sampling = {.temperature = 1.2f, .seed = 13};
  forked.n = 2;
  out.push_back(forked);
  return out;
}

struct EngineOutput {
  std::vector<std::vector<int32_t>> tokens;  // per request, choices concatenated in event order
  std::vector<std::vector<float>> logprobs;
};

EngineOutput run_engine(std::shared_ptr<model::Model> model, bool device_sampling) {
  setenv("BRIOCHE_CUDA_SAMPLING", device_sampling ? "1" : "0", 1);
  auto engine =
      std::make_unique<Engine>(make_model_runner(model, {.block_size = 16, .n_blocks = 256, .max_context = 256}),
                               std::make_unique<testing::ToyCodec>());
  unsetenv("BRIOCHE_CUDA_SAMPLING");
  // Submitted together, so both runs batch the same rows at every step (one
  // by one, the engine could start the first before the rest arrived, and a
  // different mix of prefill and decode rows rounds the logits differently).
  std::vector<std::shared_ptr<RequestHandle>> handles = engine->submit_all(engine_requests());
  EngineOutput out;
  for (auto& h : handles) {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    while (std::optional<GenerationEvent> e = h->next()) {
      EXPECT_NE(e->finish, FinishReason::Error) << e->error;
      tokens.push_back(-1 - e->choice);  // choice marker
      tokens.insert(tokens.end(), e->tokens.begin(), e->tokens.end());
      for (const TokenLogprob& lp : e->logprobs) logprobs.push_back(lp.logprob);
    }
    out.tokens.push_back(std::move(tokens));
    out.logprobs.push_back(std::move(logprobs));
  }
  return out;
}

TEST(CudaEngineSampling, DeviceSamplingGivesTheHostTokens) {
  REQUIRE_CUDA_DEVICE();
  const tools::ShapePreset tiny{"tiny", "llama", 1000, 256, 512, 2, 4, 2, 64, 10000.0f, false, false};
  model::Checkpoint ck = tools::random_checkpoint(tiny, DType::BF16, 3);
  model::move_weights(ck, Device::CUDA);
  auto model = std::make_shared<model::LlamaModel>(std::move(ck));
  const EngineOutput host = run_engine(model, false);
  const EngineOutput device = run_engine(model, true);
  ASSERT_EQ(device.tokens.size(), host.tokens.size());
  for (size_t i = 0; i < host.tokens.size(); ++i) {
    EXPECT_GT(host.tokens[i].size(), 24u) << "request " << i;
    EXPECT_EQ(device.tokens[i], host.tokens[i]) << "request " << i;
    ASSERT_EQ(device.logprobs[i].size(), host.logprobs[i].size()) << "request " << i;
    for (size_t k = 0; k < host.logprobs[i].size(); ++k)
      EXPECT_NEAR(device.logprobs[i][k], host.logprobs[i][k], 1e-5) << "request " << i << " token " << k;
  }
}

}  // namespace
}  // namespace brioche::engine

#else

TEST(CudaDeviceSampler, NotBuilt) { GTEST_SKIP() << "skipped: no CUDA device (built without BRIOCHE_CUDA)"; }

#endif
