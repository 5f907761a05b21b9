// Token sampling on the device for a batch of logits rows: the pipeline of
// engine/sampler.h (penalties, logit bias, grammar mask, temperature,
// greedy, top-k, top-p, min-p, inverse-CDF draw) and the raw logprobs of
// engine/logprobs.h, with only the results copied back.
//
// Plain C++ (no CUDA headers): the engine fills these structs on the host,
// the launcher uploads them in one pinned copy, runs a cluster of CTAs per row and
// copies the per-row results back (one pinned copy, waited for by an event).
//
// Same numbers as the host: every step that decides which tokens survive
// uses the host's float operations in the host's order (l / r, l * r,
// l -= presence + frequency * count, l += bias, l / temperature,
// max + log(min_p), w = exp(l - max) rounded to float). Masses are summed in
// double in a different order than the host's sequential sums, so a top-p
// cut or a draw can differ only when u * mass (or top_p * mass) falls within
// ~1e-16 (relative) of a cumulative boundary; exp is evaluated in double and
// rounded to float (the host's expf is correctly rounded in practice).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace brioche::cuda {

// Rows asking for more alternatives are sampled on the host by the caller.
constexpr int kMaxDeviceTopLogprobs = 32;

// One distinct token that penalties or logit bias touch, in one row.
struct SamplePenaltyEntry {
  int32_t token = 0;
  int32_t repeated = 0;       // 1: in prompt or output (repetition penalty applies)
  float output_count = 0.0f;  // occurrences in the output (presence/frequency)
  int32_t bias_begin = 0;     // biases[bias_begin, bias_end) added in this order
  int32_t bias_end = 0;
};

struct SampleRowParams {
  int32_t logit_row = 0;     // row of the logits tensor
  int32_t greedy = 0;        // 1: argmax (first maximum), no draw
  float temperature = 1.0f;  // divides the logits unless greedy
  int32_t top_k = 0;         // active when 0 < top_k < vocab
  float top_p = 1.0f;        // active when < 1
  float log_min_p = 0.0f;    // std::log(min_p) on the host; used when use_min_p
  int32_t use_min_p = 0;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t entry_begin = 0, entry_end = 0;  // SampleBatch::entries of this row, one per distinct token
  int32_t mask_index = -1;                 // row of SampleBatch::masks, -1: every token allowed
  int32_t want_logprobs = 0;               // report the sampled token's raw logprob
  int32_t top_logprobs = 0;                // <= kMaxDeviceTopLogprobs
  int32_t skip = 0;                        // 1: not sampled here (the caller handles the row)
  double u = 0.0;                          // the draw in [0, 1), from the request's RNG
};

struct SampleBatch {
  int32_t vocab = 0;
  std::span<const SampleRowParams> rows;
  std::span<const SamplePenaltyEntry> entries;
  std::span<const float> biases;
  std::span<const uint32_t> masks;  // [n masks, ceil(vocab / 32)]: bit t % 32 of word t / 32 = allowed
};

enum class SampleStatus : int32_t { Ok = 0, BadLogit = 1, NothingAllowed = 2 };

struct SampleResult {
  int32_t token = -1;
  SampleStatus status = SampleStatus::Ok;
  int32_t bad_index = -1;  // first NaN/+inf logit found (BadLogit)
  float bad_value = 0.0f;
  float logprob = 0.0f;  // raw logprob of token (want_logprobs)
  int32_t n_top = 0;
  int32_t top_tokens[kMaxDeviceTopLogprobs];  // best first, ties to the lower id
  float top_logprobs[kMaxDeviceTopLogprobs];
};

// Samples every row of `batch` from the device logits. The logits are left
// as they were (processed logits go to scratch).
//   logits : device f32 [n logits rows, vocab], row stride `logits_stride` floats
struct SampleRowsArgs {
  const float* logits;
  int64_t logits_stride;
  const SampleBatch* batch;
};

// One batch's sampling, launched without waiting for it. launch() queues
// the upload, the kernel and the results' copy back on the brioche stream
// and returns; the sampled ids are then on the device for work queued after
// it (tokens(): the engine feeds them to the next decode step before the
// host has seen them). collect() waits for this launch alone (an event, so
// work queued after it keeps the GPU busy) and copies its results to the
// host. One launch at a time: a launch before the last one was collected
// waits for it and drops its results. Pinned host buffers are per run.
class SampleRun {
 public:
  SampleRun();
  ~SampleRun();
  SampleRun(const SampleRun&) = delete;
  SampleRun& operator=(const SampleRun&) = delete;

  void launch(const SampleRowsArgs& args);
  // Device i32 [rows] of the last launch: each row's sampled id, 0 for a
  // row without one (skipped or failed: still a valid id to embed). Valid
  // for work queued before the next launch.
  const int32_t* tokens() const;
  // results[i] for the last launch's row i (host memory).
  void collect(std::span<SampleResult> results);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// CTAs the full pipeline gives each row of an n_rows batch: a cluster of 1,
// 2, 4 or 8, the most whose clusters all fit on the GPU at once (8 for one
// row).
int sample_ctas_per_row(int n_rows);

// Whether every row of `batch` is greedy with nothing that changes its
// logits or asks for logprobs: such a batch takes a kernel of one CTA a row
// (the first maximum of the raw row) instead of the full pipeline.
bool plain_greedy(const SampleBatch& batch);

}  // namespace brioche::cuda
