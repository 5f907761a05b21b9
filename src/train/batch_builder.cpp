#include "train/batch_builder.h"

#include "core/error.h"

namespace brioche::train {

namespace {

// Appends one unshared sequence prompt+response as its own span.
void add_sequence(TokenBatch& b, const std::vector<int32_t>& prompt, const std::vector<int32_t>& response, int sequence,
                  bool score_prompt) {
  const int32_t first = int32_t(b.tokens.size());
  const int32_t P = int32_t(prompt.size()), L = P + int32_t(response.size());
  for (int32_t k = 0; k < L; ++k) {
    b.tokens.push_back(k < P ? prompt[size_t(k)] : response[size_t(k - P)]);
    b.positions.push_back(k);
    b.branch.push_back(0);
  }
  for (int32_t k = 1; k < L; ++k) {
    const bool is_response = k >= P;
    if (!is_response && !score_prompt) continue;
    b.scored.push_back(
        {.row = first + k - 1, .target = b.tokens[size_t(first + k)], .sequence = sequence, .response = is_response});
  }
  b.spans.push_back({first, L});
}

void add_shared(TokenBatch& b, const TokenizedPair& p, int pair, bool score_prompt) {
  const int32_t first = int32_t(b.tokens.size());
  const int32_t P = int32_t(p.prompt.size()), Rc = int32_t(p.chosen.size()), Rr = int32_t(p.rejected.size());
  for (int32_t k = 0; k < P; ++k)
    b.tokens.push_back(p.prompt[size_t(k)]), b.positions.push_back(k), b.branch.push_back(0);
  for (int32_t k = 0; k < Rc; ++k)
    b.tokens.push_back(p.chosen[size_t(k)]), b.positions.push_back(P + k), b.branch.push_back(1);
  for (int32_t k = 0; k < Rr; ++k)
    b.tokens.push_back(p.rejected[size_t(k)]), b.positions.push_back(P + k), b.branch.push_back(2);
  if (score_prompt) {
    for (int32_t k = 1; k < P; ++k)
      b.scored.push_back(
          {.row = first + k - 1, .target = p.prompt[size_t(k)], .sequence = 2 * pair, .response = false});
  }
  for (int32_t k = 0; k < Rc; ++k)
    b.scored.push_back({.row = first + P - 1 + k, .target = p.chosen[size_t(k)], .sequence = 2 * pair});
  for (int32_t k = 0; k < Rr; ++k)
    b.scored.push_back({.row = k == 0 ? first + P - 1 : first + P + Rc + k - 1,
                        .target = p.rejected[size_t(k)],
                        .sequence = 2 * pair + 1});
  b.spans.push_back({first, P + Rc + Rr});
}

}  // namespace

TokenBatch build_sft_batch(std::span<const TokenizedExample* const> examples, SftScope scope) {
  TokenBatch b;
  for (size_t i = 0; i < examples.size(); ++i) {
    const auto& e = *examples[i];
    BRIOCHE_CHECK(e.prompt.size() + e.response.size() >= 2, "sft batch: example ", i, " has fewer than 2 tokens");
    add_sequence(b, e.prompt, e.response, int(i), scope == SftScope::Full || e.prompt.empty());
  }
  b.n_sequences = int(examples.size());
  b.branch.clear();  // all sequences are unshared: plain causal masks
  return b;
}

TokenBatch build_preference_batch(std::span<const TokenizedPair* const> pairs, const PreferenceBatchOptions& o) {
  TokenBatch b;
  const bool score_prompt = o.method == Method::ORPO && o.sft_scope == SftScope::Full;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& p = *pairs[i];
    BRIOCHE_CHECK(!p.prompt.empty() && !p.chosen.empty() && !p.rejected.empty(), "preference batch: pair ", i,
                  " needs a non-empty prompt, chosen and rejected");
    if (o.prefix_shared) {
      add_shared(b, p, int(i), score_prompt);
    } else {
      add_sequence(b, p.prompt, p.chosen, int(2 * i), score_prompt);
      add_sequence(b, p.prompt, p.rejected, int(2 * i + 1), false);
    }
  }
  b.n_sequences = int(2 * pairs.size());
  if (!o.prefix_shared) b.branch.clear();
  return b;
}

}  // namespace brioche::train
