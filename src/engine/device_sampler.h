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
#include "ops/sample.h"

namespace brioche::engine {

class DeviceSampler {
 public:
  explicit DeviceSampler(int32_t vocab_size);

  // False when BRIOCHE_CUDA_SAMPLING is "0".
  static bool enabled_by_environment();

  // One sequence's penalty entries (one per distinct token of its prompt
  // and output: repetition flag, output count), kept between its steps so
  // that a step adds only the output tokens that are new since the last one
  // instead of walking prompt + output again: a 64-row step with repetition
  // and frequency penalties went 3.0 → 0.34 ms of host time at 4,096-token
  // prompts and 0.55 → 0.18 ms at 512 (`bench/sampler_bench
  // --benchmark_filter=DeviceUpload`, 2-core dev host). What is left is
  // copying the entries into the upload (O(distinct tokens) a row).
  // The scheduler keeps one per sequence, whose prompt is fixed and whose
  // output only grows (a preempted sequence keeps its tokens), so lengths
  // tell what is new: a prompt of another length or a shorter output
  // rebuilds it from scratch (contents are not compared).
  struct PenaltyEntries {
    std::vector<cuda::SamplePenaltyEntry> entries;  // first-seen order (prompt, then output); no biases
    // [vocab] token -> its entry or -1, allocated at the first penalized
    // step: vocab × 4 bytes per penalized sequence (196 KB for SmolLM2's
    // vocabulary); a hash map instead made the first build ~3x slower.
    std::vector<int32_t> index;
    size_t n_prompt = 0, n_output = 0;  // tokens of the row's prompt and output applied

    int32_t entry_of(int32_t token) const { return index.empty() ? -1 : index[size_t(token)]; }
    void clear();  // keeps the index's allocation
  };

  struct Row {
    Sampler* sampler = nullptr;              // parameters, and the RNG the draw comes from
    int32_t logit_row = 0;                   // row of the logits tensor
    std::span<const int32_t> prompt;         // repetition penalty only
    std::span<const int32_t> output;         // all penalties
    const uint32_t* allowed_mask = nullptr;  // [ceil(vocab / 32)] or null
    PenaltyEntries* penalties = nullptr;     // the sequence's, kept across steps; null: built for this call only
  };

  // results[i] for rows[i], as rows[i].sampler->sample() would give on a host
  // copy of the row; the same errors (the first failing row's) are thrown.
  //   logits : CUDA f32 [n, vocab]
  std::vector<Sampler::Result> sample(const Tensor& logits, std::span<const Row> rows);

  // sample() in two halves, so that the host can queue more device work
  // (the next decode step, fed by tokens()) before it waits. launch() draws
  // the rows' u and queues the sampling; collect() waits for it alone and
  // returns sample()'s results. The rows (their spans and masks) and the
  // logits must stay as they are until collect(), which a row sampled on the
  // host (!all_on_device()) reads.
  void launch(const Tensor& logits, std::span<const Row> rows);
  std::vector<Sampler::Result> collect();
  // The launched rows' ids on the device (CUDA i32 [rows]; 0 for a row
  // without one), valid for work queued before the next launch.
  Tensor tokens() const { return run_.tokens(); }
  // Whether the launched rows are all sampled on the device (none asked for
  // more than cuda::kMaxDeviceTopLogprobs alternatives).
  bool all_on_device() const;

  // The upload for `rows` (what sample() sends): parameters, penalty/bias
  // entries, masks; draws u from each non-greedy row's Sampler. Valid until
  // the next call. Fails like Sampler on tokens outside the vocabulary.
  const cuda::SampleBatch& prepare(std::span<const Row> rows);

 private:
  // Appends row's penalty/bias entries; fails like Sampler on tokens outside the vocabulary.
  void add_entries(const Row& row, cuda::SampleRowParams& params);
  // Brings `cache` up to row's prompt and output (from scratch when they do
  // not continue what it holds); checks the new tokens before changing it.
  void update_penalties(const Row& row, PenaltyEntries& cache) const;

  int32_t vocab_;
  std::vector<cuda::SampleRowParams> params_;
  std::vector<cuda::SamplePenaltyEntry> entries_;
  std::vector<float> biases_;
  std::vector<uint32_t> masks_;
  cuda::SampleBatch batch_;
  ops::SampleRun run_;
  std::vector<Row> launched_;  // until collect()
  Tensor logits_;              // the launched rows' logits, until collect()
  std::vector<cuda::SampleResult> results_;
  PenaltyEntries fresh_;  // for rows without their own
  std::vector<std::pair<int32_t, float>> sorted_bias_;
};

}  // namespace brioche::engine
