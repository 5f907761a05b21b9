// Token sampling for one row of logits: penalties, logit bias, grammar mask,
// temperature, top-k / top-p / min-p truncation, a seeded draw, and the
// log-probabilities reported to the client.
//
// One Sampler per request: it owns the request's random state. The engine
// calls sample() once per generated token with that request's row of the
// batch's logits. Pipeline, in this order (matching vLLM; HF transformers for
// the steps it has):
//
//   1. repetition penalty over prompt + output tokens (HF/vLLM semantics;
//      llama.cpp instead looks at the last N tokens only): each distinct token
//      t seen once or more: l[t] = l[t] > 0 ? l[t] / r : l[t] * r.
//   2. presence / frequency penalties over output tokens only (OpenAI, vLLM):
//      l[t] -= presence * (count[t] > 0) + frequency * count[t].
//   3. logit bias (OpenAI logit_bias): l[t] += bias[t].
//   4. grammar mask: tokens whose bit is clear get l[t] = -inf.
//   5. temperature < 1e-5 means greedy (vLLM's epsilon): argmax of l, lowest
//      id on ties; steps 6-8 are skipped and no random draw is used.
//      Otherwise l /= temperature.
//   6. top-k: keep tokens with l >= the k-th largest l (ties kept, as HF).
//   7. top-p (nucleus) on the top-k distribution: walking tokens from most to
//      least likely, keep each token while the mass of the tokens before it
//      is < top_p; the first token is always kept. Tokens tied with the last
//      kept one are kept too.
//   8. min-p: keep tokens with p >= min_p * p_max (relative to the most
//      likely token, so not affected by 6-7).
//   9. draw u in [0, 1) from the request's RNG and pick by inverse CDF over
//      the kept tokens in ascending id order.
//
// Top-k, top-p and min-p all reduce to a lower bound on l, so the kept set is
// {t : l[t] >= threshold}. The full-vocabulary passes are vector code (exp,
// division, weights summed in 256-token blocks; the draw walks block sums).
// Top-k and top-p first find, in one pass, a weight level that surely holds
// the k-th token or the nucleus cut, then select (nth_element) or sort
// (growing partial selections) only the tokens above it; a flat
// distribution falls back to all candidates only if it has to.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "engine/rng.h"

namespace brioche::engine {

struct SamplingParams {
  float temperature = 1.0f;         // < 1e-5: greedy
  int top_k = 0;                    // <= 0 or >= vocab: off
  float top_p = 1.0f;               // in [0, 1]; 1: off
  float min_p = 0.0f;               // in [0, 1]; 0: off
  float repetition_penalty = 1.0f;  // > 0; 1: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, added to its logit)
  std::optional<uint64_t> seed;                       // set: reproducible tokens; unset: std::random_device
  bool logprobs = false;                              // report the sampled token's logprob
  int top_logprobs = 0;                               // report the N most likely alternatives (implies logprobs)
};

// One row of the batch, as the engine hands it over.
struct SamplerRow {
  std::span<float> logits;                 // [vocab] model logits; left holding the processed logits
  std::span<const int32_t> prompt;         // prompt tokens (repetition penalty only)
  std::span<const int32_t> output;         // tokens generated so far (all penalties)
  const uint32_t* allowed_mask = nullptr;  // [ceil(vocab / 32)] bit t % 32 of word t / 32 set = allowed; null = all
};

class Sampler {
 public:
  // Fails with a message naming the field if a parameter is out of range.
  Sampler(SamplingParams params, int vocab_size);

  struct Result {
    int32_t token = -1;
    // Raw logprob of `token` (log_softmax of the model logits, see
    // logprobs.h); NaN unless params.logprobs or params.top_logprobs > 0.
    float logprob = 0.0f;
    std::vector<std::pair<int32_t, float>> top;  // [top_logprobs] (token, raw logprob), best first
  };

  // Fails if the row has the wrong size, holds a NaN or +inf logit, or if no
  // token is left (e.g. the mask allows nothing).
  // After return, row.logits holds the processed logits: steps 1-4 applied,
  // and for sampling also temperature, with truncated tokens at -inf.
  Result sample(const SamplerRow& row);

  // Speculative decoding (docs/speculative.md): the verdict on a draft token
  // proposed for this row by a deterministic proposer (prompt lookup), with
  // the same pipeline as sample(). Greedy: accepted when the argmax is the
  // draft; result.token is the argmax either way. Sampled: accepted with
  // probability p(draft) under the processed distribution (temperature and
  // truncation applied); rejected, result.token is drawn from p with the
  // draft's mass removed, renormalised. That is the standard rejection rule
  // (min(1, p/q) with q a point mass on the draft), so every kept token is
  // distributed exactly as sample() would draw it. Two draws on rejection,
  // one on acceptance: a seeded request is reproducible but not the same
  // stream as without speculation.
  // With `draft_probs` (q, [vocab], the distribution a draft model drew the
  // draft from): accepted with probability min(1, p(draft) / q(draft));
  // rejected, result.token is drawn from max(0, p - q) renormalised. Then
  // P(t) = q(t) min(1, p/q) + (1 - sum_s min(p(s), q(s))) (p(t) - q(t))+ / Z
  //      = min(p, q) + (p - q)+ = p(t), with Z = sum_s (p(s) - q(s))+.
  // Greedy ignores q (the draft is kept while it is the argmax).
  struct Verdict {
    Result result;
    bool accepted = false;
  };
  Verdict verify_draft(const SamplerRow& row, int32_t draft, std::span<const float> draft_probs = {});

  const SamplingParams& params() const { return params_; }
  int vocab_size() const { return vocab_size_; }
  bool is_greedy() const;
  // The next uniform in [0, 1) of this request's stream: the u that sample()
  // draws for a non-greedy token. engine/device_sampler.h draws it here and
  // uploads it, so device and host pick the same token from the same logits.
  double draw_unit() { return rng_.next_unit(); }
  // A step whose token is fixed (jump-forward: the grammar allows only one)
  // is not sampled, but the random state advances as sample() would have
  // (one draw unless greedy), so a seeded stream matches an unjumped run.
  void skip_draw() {
    if (!is_greedy()) rng_.next_unit();
  }

 private:
  void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output) const;
  void apply_mask(std::span<float> logits, const uint32_t* allowed_mask) const;
  // Draws from the truncated distribution, or with draft >= 0 rules on it
  // (verify_draft; *accepted set).
  int32_t sample_truncated(std::span<float> logits, int32_t draft = -1, bool* accepted = nullptr,
                           std::span<const float> draft_probs = {});
  int32_t verify_against(std::span<float> logits, int32_t draft, std::span<const float> q, bool* accepted);
  Result sample_or_verify(const SamplerRow& row, int32_t draft, bool* accepted,
                          std::span<const float> draft_probs = {});

  SamplingParams params_;
  int vocab_size_;
  SamplerRng rng_;
};

}  // namespace brioche::engine
