// The host side of device sampling (engine/device_sampler.h): what is
// uploaded for each row (parameters, one entry per distinct penalized or
// biased token, masks, the u drawn from the request's stream) and the
// switch. Runs everywhere; the kernels are checked by cuda_device_sampler_test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/device_sampler.h"
#include "ops/sample.h"

namespace brioche::engine {
namespace {

TEST(DeviceSampler, UploadsParametersEntriesMasksAndDraws) {
  const int vocab = 100;
  Sampler greedy({.temperature = 0.0f, .logprobs = true, .top_logprobs = 3}, vocab);
  SamplingParams sampled_params{.temperature = 0.7f,
                                .top_k = 20,
                                .top_p = 0.9f,
                                .min_p = 0.05f,
                                .repetition_penalty = 1.3f,
                                .presence_penalty = 0.5f,
                                .frequency_penalty = 0.25f,
                                .logit_bias = {{7, 1.0f}, {3, 2.0f}, {7, -0.5f}, {50, 4.0f}},
                                .seed = 99};
  Sampler sampled(sampled_params, vocab), reference(sampled_params, vocab);
  const std::vector<int32_t> prompt{1, 2, 2, 3};
  const std::vector<int32_t> output{3, 4, 3, 7};
  std::vector<uint32_t> mask((vocab + 31) / 32, 0u);
  mask[0] = 0b1010;
  mask[3] = 0x8u;
  const std::vector<DeviceSampler::Row> rows{
      {.sampler = &greedy, .logit_row = 1},
      {.sampler = &sampled, .logit_row = 0, .prompt = prompt, .output = output, .allowed_mask = mask.data()}};
  DeviceSampler device(vocab);
  const cuda::SampleBatch& batch = device.prepare(rows);

  ASSERT_EQ(batch.vocab, vocab);
  ASSERT_EQ(batch.rows.size(), 2u);
  const cuda::SampleRowParams& g = batch.rows[0];
  EXPECT_EQ(g.logit_row, 1);
  EXPECT_EQ(g.greedy, 1);
  EXPECT_EQ(g.want_logprobs, 1);
  EXPECT_EQ(g.top_logprobs, 3);
  EXPECT_EQ(g.entry_begin, g.entry_end);  // no penalties, no bias
  EXPECT_EQ(g.mask_index, -1);
  EXPECT_EQ(g.u, 0.0);

  const cuda::SampleRowParams& s = batch.rows[1];
  EXPECT_EQ(s.greedy, 0);
  EXPECT_EQ(s.temperature, 0.7f);
  EXPECT_EQ(s.top_k, 20);
  EXPECT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.use_min_p, 1);
  EXPECT_EQ(s.log_min_p, std::log(0.05f));  // the host's float bound
  EXPECT_EQ(s.want_logprobs, 0);
  EXPECT_EQ(s.u, reference.draw_unit());  // the request's own next u
  EXPECT_EQ(s.mask_index, 0);
  ASSERT_EQ(batch.masks.size(), mask.size());
  EXPECT_EQ(batch.masks[0], 0b1010u);
  EXPECT_EQ(batch.masks[3], 0x8u);

  // Distinct tokens: 1, 2, 3, 4 (prompt/output: repeated), 7 (output, biased), 50 (biased only).
  struct Seen {
    int32_t repeated;
    float count;
    std::vector<float> biases;
  };
  std::map<int32_t, Seen> entries;
  for (int32_t e = s.entry_begin; e < s.entry_end; ++e) {
    const cuda::SamplePenaltyEntry& entry = batch.entries[size_t(e)];
    EXPECT_EQ(entries.count(entry.token), 0u) << "token " << entry.token << " has two entries";
    Seen& seen = entries[entry.token];
    seen.repeated = entry.repeated;
    seen.count = entry.output_count;
    seen.biases.assign(batch.biases.begin() + entry.bias_begin, batch.biases.begin() + entry.bias_end);
  }
  ASSERT_EQ(entries.size(), 6u);
  EXPECT_EQ(entries[1].repeated, 1);
  EXPECT_EQ(entries[1].count, 0.0f);
  EXPECT_EQ(entries[2].count, 0.0f);
  EXPECT_EQ(entries[3].count, 2.0f);
  EXPECT_EQ(entries[3].biases, (std::vector<float>{2.0f}));
  EXPECT_EQ(entries[4].count, 1.0f);
  EXPECT_EQ(entries[7].repeated, 1);
  EXPECT_EQ(entries[7].count, 1.0f);
  EXPECT_EQ(entries[7].biases, (std::vector<float>{1.0f, -0.5f}));  // in the request's order
  EXPECT_EQ(entries[50].repeated, 0);
  EXPECT_EQ(entries[50].biases, (std::vector<float>{4.0f}));

  // A second step reuses the buffers and draws the next u.
  const cuda::SampleBatch& again = device.prepare(rows);
  EXPECT_EQ(again.rows[1].u, reference.draw_unit());
  EXPECT_EQ(again.rows[1].entry_end - again.rows[1].entry_begin, 6);
}

// A row's entries and biases as (token, repeated, count, biases), in upload order.
struct UploadedEntry {
  int32_t token, repeated;
  float count;
  std::vector<float> biases;
  bool operator==(const UploadedEntry&) const = default;
};

std::vector<UploadedEntry> uploaded_entries(const cuda::SampleBatch& batch, size_t row) {
  std::vector<UploadedEntry> out;
  const cuda::SampleRowParams& p = batch.rows[row];
  for (int32_t e = p.entry_begin; e < p.entry_end; ++e) {
    const cuda::SamplePenaltyEntry& entry = batch.entries[size_t(e)];
    out.push_back({entry.token, entry.repeated, entry.output_count,
                   std::vector<float>(batch.biases.begin() + entry.bias_begin, batch.biases.begin() + entry.bias_end)});
  }
  return out;
}

// A sequence's PenaltyEntries, extended step by step (one new token, two at
// once, none), gives the upload a fresh build gives; a prompt of another
// length or a shorter output rebuilds it; a step with a token outside the
// vocabulary fails and leaves it as it was.
TEST(DeviceSampler, PenaltyEntriesKeptAcrossStepsEqualAFreshBuild) {
  const int vocab = 100;
  const SamplingParams params{.temperature = 0.7f,
                              .repetition_penalty = 1.3f,
                              .presence_penalty = 0.5f,
                              .frequency_penalty = 0.25f,
                              .logit_bias = {{7, 1.0f}, {3, 2.0f}, {7, -0.5f}, {50, 4.0f}},
                              .seed = 5};
  Sampler kept_sampler(params, vocab), fresh_sampler(params, vocab);
  DeviceSampler kept(vocab), fresh(vocab);
  DeviceSampler::PenaltyEntries cache;
  auto both = [&](const std::vector<int32_t>& prompt, const std::vector<int32_t>& output, const std::string& what) {
    const std::vector<DeviceSampler::Row> with{
        {.sampler = &kept_sampler, .prompt = prompt, .output = output, .penalties = &cache}};
    const std::vector<DeviceSampler::Row> without{{.sampler = &fresh_sampler, .prompt = prompt, .output = output}};
    const std::vector<UploadedEntry> got = uploaded_entries(kept.prepare(with), 0);
    EXPECT_EQ(got, uploaded_entries(fresh.prepare(without), 0)) << what;
    EXPECT_EQ(cache.n_prompt, prompt.size()) << what;
    EXPECT_EQ(cache.n_output, output.size()) << what;
    return got.size();
  };
  const std::vector<int32_t> prompt{1, 2, 2, 3};
  EXPECT_EQ(both(prompt, {}, "no output yet"), 5u);  // 1, 2, 3, then 7 and 50 for their biases
  std::vector<int32_t> output;
  for (const std::vector<int32_t>& step : std::vector<std::vector<int32_t>>{{3}, {4}, {3}, {7}, {9, 9}, {}, {50}}) {
    output.insert(output.end(), step.begin(), step.end());
    both(prompt, output, "output of " + std::to_string(output.size()));
  }
  EXPECT_EQ(cache.entries.size(), 7u);  // 1, 2, 3, 4, 7, 9, 50 (the output's 50: repeated, counted)
  both({5, 6}, {5}, "another prompt: rebuilt");
  both({5, 6}, {}, "a shorter output: rebuilt");
  const std::vector<int32_t> other_prompt{5, 6}, bad_output{6, 120};
  const std::vector<DeviceSampler::Row> bad{
      {.sampler = &kept_sampler, .prompt = other_prompt, .output = bad_output, .penalties = &cache}};
  EXPECT_THROW(kept.prepare(bad), Error);
  EXPECT_EQ(cache.n_output, 0u) << "the failed step changed the cache";
  EXPECT_EQ(cache.entries.size(), 2u) << "the failed step changed the cache";
  both({5, 6}, {6}, "after the failed step");
}

TEST(DeviceSampler, RejectsTokensOutsideTheVocabulary) {
  const int vocab = 10;
  Sampler sampler({.temperature = 1.0f, .repetition_penalty = 1.1f, .seed = 1}, vocab);
  const std::vector<int32_t> prompt{1, 12};
  const std::vector<DeviceSampler::Row> rows{{.sampler = &sampler, .prompt = prompt}};
  DeviceSampler device(vocab);
  try {
    device.prepare(rows);
    ADD_FAILURE() << "token 12 of a 10-token vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt token 12 is outside the vocabulary [0, 10)"), std::string::npos)
        << e.what();
  }
  // The failed row left no marks: the next prepare sees token 1 once.
  const std::vector<int32_t> ok{1, 1};
  const std::vector<DeviceSampler::Row> good{{.sampler = &sampler, .prompt = ok}};
  EXPECT_EQ(device.prepare(good).entries.size(), 1u);
}

TEST(DeviceSampler, EnvironmentSwitch) {
  unsetenv("BRIOCHE_CUDA_SAMPLING");
  EXPECT_TRUE(DeviceSampler::enabled_by_environment());
  setenv("BRIOCHE_CUDA_SAMPLING", "0", 1);
  EXPECT_FALSE(DeviceSampler::enabled_by_environment());
  setenv("BRIOCHE_CUDA_SAMPLING", "1", 1);
  EXPECT_TRUE(DeviceSampler::enabled_by_environment());
  unsetenv("BRIOCHE_CUDA_SAMPLING");
}

TEST(DeviceSampler, HostLogitsAreForTheHostSampler) {
  std::vector<float> data(20, 0.0f);
  Tensor logits = Tensor::view(data.data(), DType::F32, {2, 10}, nullptr);
  std::vector<cuda::SampleRowParams> params(1);
  cuda::SampleBatch batch{.vocab = 10, .rows = params};
  ops::SampleRun run;
  try {
    run.launch(logits, batch);
    ADD_FAILURE() << "host logits were sampled by the device path";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected CUDA logits"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace brioche::engine
