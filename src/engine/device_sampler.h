// Sampling a step's rows where the logits are: on the GPU, with only the
// sampled ids (and requested logprobs) copied back (ops/sample.h).
//
// Same pipeline and tie rules as Sampler (sampler.h), same raw logprobs
// (logprobs.h). Randomness stays on the host: for each non-greedy row the u
// of step 9 is drawn from the request's own Sampler (Sampler::draw_unit, the
// same xoshiro256** stream sample() uses) and uploaded, so a seeded request
// gives the same tokens on every run, alone or batched, and the CUDA engine
// picks the host sampler's token whenever the processed distributions agree
// (they differ only by float rounding of the token weights, see
// backend/cuda/sampling.h). Greedy picks the first maximum, as the host.
//
// Per row and step the host uploads: the sampling parameters, one entry per
// distinct token touched by penalties or logit bias (repetition flag, output
// count, its biases), and the grammar bitmask ([ceil(V/32)] u32) when there
// is one. Rows asking for more than cuda::kMaxDeviceTopLogprobs alternatives
// are copied back and sampled by their Sampler.
//
// BRIOCHE_CUDA_SAMPLING=0 makes the engine copy logits back and sample on
// the host instead (for comparison).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/sampling.h"
#include "core/tensor.h"
#include "engine/sampler.h"

namespace brioche::engine {

class DeviceSampler {
 public:
  explicit DeviceSampler(int32_t vocab_size);

  // False when BRIOCHE_CUDA_SAMPLING is "0".
  static bool enabled_by_environment();

  struct Row {
    Sampler* sampler = nullptr;          // parameters, and the RNG the draw comes from
    int32_t logit_row = 0;               // row of the logits tensor
    std::span<const int32_t> prompt;     // repetition penalty only
    std::span<const int32_t> output;     // all penalties
    const uint32_t* allowed_mask = nullptr;  // [ceil(vocab / 32)] or null
  };

  // results[i] for rows[i], as rows[i].sampler->sample() would give on a host
  // copy of the row; the same errors (the first failing row's) are thrown.
  //   logits : CUDA f32 [n, vocab]
  std::vector<Sampler::Result> sample(const Tensor& logits, std::span<const Row> rows);

  // The upload for `rows` (what sample() sends): parameters, penalty/bias
  // entries, masks; draws u from each non-greedy row's Sampler. Valid until
  // the next call. Fails like Sampler on tokens outside the vocabulary.
  const cuda::SampleBatch& prepare(std::span<const Row> rows);

 private:
  // Appends row's penalty/bias entries; fails like Sampler on tokens outside the vocabulary.
  void add_entries(const Row& row, cuda::SampleRowParams& params);

  int32_t vocab_;
  std::vector<cuda::SampleRowParams> params_;
  std::vector<cuda::SamplePenaltyEntry> entries_;
  std::vector<float> biases_;
  std::vector<uint32_t> masks_;
  cuda::SampleBatch batch_;
  std::vector<cuda::SampleResult> results_;
  std::vector<int32_t> entry_of_token_;  // [vocab] index into entries_ while a row is built, else -1
  std::vector<int32_t> touched_;         // tokens whose entry_of_token_ is set
  std::vector<std::pair<int32_t, float>> sorted_bias_;
};

}  // namespace brioche::engine
