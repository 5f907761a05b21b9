// Log-probabilities reported to the client (OpenAI `logprobs`/`top_logprobs`).
//
// Which distribution: like vLLM's default (logprobs_mode="raw_logprobs"), the
// model's own distribution, log_softmax of the logits as they came out of the
// model, before penalties, bias, grammar mask, temperature and truncation. So
// a token's reported logprob does not depend on the sampling settings.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace brioche::engine {

// log Z = log sum_i exp(logits[i]), computed as m + log sum exp(logits[i] - m)
// with m the maximum (terms by a vector exp, ~2e-7 relative; sums of blocks in
// double). logprob(i) = logits[i] - log Z.
// Fails on an empty span, a NaN or a +inf logit.
double log_softmax_normalizer(std::span<const float> logits);  // logits: [vocab]

// The n most likely tokens as (token, logprob), most likely first; ties go
// to the lower token id. O(vocab log n) with a small heap, no allocation of
// vocab size.
std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits,  // [vocab]
                                                    int n, double log_normalizer);

}  // namespace brioche::engine
