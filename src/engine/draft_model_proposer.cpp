#include "engine/draft_model_proposer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/device.h"

namespace brioche::engine {
namespace {

// Rows per draft forward while catching up on prompts (a long prompt is
// taken in several forwards, as the target's chunked prefill does).
constexpr int32_t kMaxCatchUpRows = 512;
// Drafts of a seeded request come from their own stream, derived from the
// request's seed, so the request stays reproducible.
constexpr uint64_t kDraftSeedSalt = 0xd1a5'7ed0'5eed'0001ull;

SamplingParams draft_sampling(const SamplingParams& request) {
  SamplingParams params;
  params.temperature = request.temperature;
  params.top_k = request.top_k;
  params.top_p = request.top_p;
  params.min_p = request.min_p;
  // The bias too (it needs no history): a request that pushes a token up
  // would otherwise reject every draft where the bias decides.
  params.logit_bias = request.logit_bias;
  if (request.seed) params.seed = *request.seed ^ kDraftSeedSalt;
  return params;
}

}  // namespace

DraftModelProposer::DraftModelProposer(std::unique_ptr<ModelRunner> draft, double cost_per_draft)
    : runner_(std::move(draft)),
      cost_per_draft_(cost_per_draft),
      blocks_(runner_->kv_block_count(), runner_->kv_block_size()) {}

void DraftModelProposer::trim_blocks(SequenceDraft& state, int32_t n_positions) {
  const int32_t bs = blocks_.block_size();
  const size_t keep = size_t((n_positions + bs - 1) / bs);
  while (state.block_table.size() > keep) {
    blocks_.release(state.block_table.back());
    state.block_table.pop_back();
  }
}

bool DraftModelProposer::ensure_blocks(SequenceDraft& state, int32_t n_positions) {
  const int32_t bs = blocks_.block_size();
  const int32_t need = (n_positions + bs - 1) / bs - int32_t(state.block_table.size());
  if (need <= 0) return true;
  if (need > blocks_.available_blocks()) return false;
  for (int32_t i = 0; i < need; ++i) state.block_table.push_back(*blocks_.allocate());
  return true;
}

void DraftModelProposer::evict(uint64_t sequence) {
  auto it = states_.find(sequence);
  if (it == states_.end()) return;
  trim_blocks(it->second, 0);
  it->second.cached.clear();
}

void DraftModelProposer::forget(uint64_t sequence) {
  evict(sequence);
  states_.erase(sequence);
}

bool DraftModelProposer::draw(SequenceDraft& state, int32_t row, SequenceConstraint* constraint, Draft& draft) {
  const int32_t vocab = runner_->vocab_size();
  std::span<float> logits(logits_.row_as<float>(row), size_t(vocab));
  // Under the request's grammar the draft is drawn from the masked logits
  // (q is then the masked distribution: still the one the draft came from,
  // which is all the rejection rule needs) and the walk advances over it.
  const uint32_t* mask = nullptr;
  if (constraint) {
    bool any_allowed = true;
    mask = constraint->draft_mask(&any_allowed);
    if (!any_allowed) return false;
  }
  const Sampler::Result result = state.sampler->sample(SamplerRow{.logits = logits, .allowed_mask = mask});
  if (constraint && !constraint->advance_draft(result.token)) return false;
  draft.tokens.push_back(result.token);
  if (state.sampler->is_greedy()) return true;
  // q = softmax of the processed logits (temperature applied, truncated
  // and masked tokens at -inf): the distribution sample() drew from.
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  const size_t base = draft.probs.size();
  draft.probs.resize(base + size_t(vocab));
  double total = 0.0;
  for (int32_t t = 0; t < vocab; ++t) {
    const float w = std::isinf(logits[size_t(t)]) ? 0.0f : std::exp(logits[size_t(t)] - max_logit);
    draft.probs[base + size_t(t)] = w;
    total += w;
  }
  for (int32_t t = 0; t < vocab; ++t) draft.probs[base + size_t(t)] = float(draft.probs[base + size_t(t)] / total);
  return true;
}

std::vector<Draft> DraftModelProposer::propose(std::span<const DraftQuery> queries) {
  std::vector<Draft> drafts(queries.size());
  // Grammar walks of the queries' constraints, rolled back when this returns.
  std::vector<DraftGrammarWalk> walks;
  struct Active {
    size_t query;
    SequenceDraft* state;
    int32_t length;  // T: tokens of the sequence now
    int32_t want;    // drafts to make (fewer once the grammar allows no more)
  };
  std::vector<Active> active;
  for (size_t i = 0; i < queries.size(); ++i) {
    const DraftQuery& q = queries[i];
    const int32_t length = int32_t(q.tokens.size());
    if (length == 0 || q.max_tokens <= 0) continue;
    SequenceDraft& state = states_[q.sequence];
    if (!state.sampler) {
      BRIOCHE_CHECK(q.sampling != nullptr, "DraftModelProposer: a query without sampling parameters");
      state.sampler = std::make_unique<Sampler>(draft_sampling(*q.sampling), runner_->vocab_size());
    }
    // Keep the K/V of the prefix the cache shares with the tokens now, all
    // but the last token at most (its row gives the first draft).
    const auto mismatch = std::mismatch(state.cached.begin(), state.cached.end(), q.tokens.begin(), q.tokens.end());
    const int32_t shared = std::min<int32_t>(int32_t(mismatch.first - state.cached.begin()), length - 1);
    state.cached.resize(size_t(shared));
    trim_blocks(state, shared);
    // Drafts 1..want-1 are run through the draft (the last one is not).
    int32_t want = std::min(q.max_tokens, runner_->context_length() - length);
    while (want > 0 && !ensure_blocks(state, length + want - 1)) --want;
    if (want <= 0) continue;
    if (q.constraint) walks.emplace_back(q.constraint);
    active.push_back({i, &state, length, want});
  }
  if (active.empty()) return drafts;

  // Catch up: tokens [cached, T) as prefill chunks; the row of token T - 1
  // gives draft 1.
  for (;;) {
    batch_.tokens.clear();
    batch_.positions.clear();
    batch_.wants_logits.clear();
    batch_.sequences.clear();
    std::vector<size_t> with_logits;  // indices into `active`, in logits row order
    int32_t budget = kMaxCatchUpRows;
    for (size_t a = 0; a < active.size() && budget > 0; ++a) {
      SequenceDraft& state = *active[a].state;
      const std::span<const int32_t> tokens = queries[active[a].query].tokens;
      const int32_t from = int32_t(state.cached.size());
      const int32_t take = std::min(active[a].length - from, budget);
      if (take <= 0) continue;
      batch_.sequences.push_back({.first_row = batch_.n_rows(),
                                  .n_rows = take,
                                  .n_past = from,
                                  .block_table = std::span<const int32_t>(state.block_table),
                                  .adapter = nullptr});
      const bool reaches_end = from + take == active[a].length;
      for (int32_t r = 0; r < take; ++r) {
        batch_.tokens.push_back(tokens[size_t(from + r)]);
        batch_.positions.push_back(from + r);
        batch_.wants_logits.push_back(reaches_end && r == take - 1 ? 1 : 0);
      }
      if (reaches_end) with_logits.push_back(a);
      state.cached.insert(state.cached.end(), tokens.begin() + from, tokens.begin() + from + take);
      budget -= take;
    }
    if (batch_.tokens.empty()) break;
    runner_->forward(batch_, logits_);
    if (logits_.device() != Device::CPU) logits_ = ops::to_device(logits_, Device::CPU);
    for (size_t r = 0; r < with_logits.size(); ++r) {
      Active& a = active[with_logits[r]];
      if (!draw(*a.state, int32_t(r), queries[a.query].constraint, drafts[a.query])) a.want = 0;
    }
  }

  // Draft j (1-based) at position T + j - 1 gives draft j + 1.
  int32_t most = 0;
  for (const Active& a : active) most = std::max(most, a.want);
  for (int32_t j = 1; j < most; ++j) {
    batch_.tokens.clear();
    batch_.positions.clear();
    batch_.wants_logits.clear();
    batch_.sequences.clear();
    std::vector<size_t> rows;
    for (size_t a = 0; a < active.size(); ++a) {
      if (active[a].want <= j) continue;
      SequenceDraft& state = *active[a].state;
      const int32_t token = drafts[active[a].query].tokens[size_t(j - 1)];
      const int32_t position = active[a].length + j - 1;
      batch_.sequences.push_back({.first_row = batch_.n_rows(),
                                  .n_rows = 1,
                                  .n_past = position,
                                  .block_table = std::span<const int32_t>(state.block_table),
                                  .adapter = nullptr});
      batch_.tokens.push_back(token);
      batch_.positions.push_back(position);
      batch_.wants_logits.push_back(1);
      state.cached.push_back(token);
      rows.push_back(a);
    }
    if (rows.empty()) break;
    runner_->forward(batch_, logits_);
    if (logits_.device() != Device::CPU) logits_ = ops::to_device(logits_, Device::CPU);
    for (size_t r = 0; r < rows.size(); ++r) {
      Active& a = active[rows[r]];
      if (!draw(*a.state, int32_t(r), queries[a.query].constraint, drafts[a.query])) a.want = j;
    }
  }
  return drafts;
}

}  // namespace brioche::engine
