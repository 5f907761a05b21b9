#include "engine/proposer.h"

#include <algorithm>

#include "core/error.h"

namespace brioche::engine {

PromptLookupProposer::PromptLookupProposer(int32_t min_ngram, int32_t max_ngram)
    : min_ngram_(min_ngram), max_ngram_(max_ngram) {
  BRIOCHE_CHECK(min_ngram >= 1 && max_ngram >= min_ngram,
                "PromptLookupProposer: expected 1 <= min_ngram <= max_ngram, got ", min_ngram, " and ", max_ngram);
}

std::vector<Draft> PromptLookupProposer::propose(std::span<const DraftQuery> queries) {
  std::vector<Draft> drafts(queries.size());
  for (size_t i = 0; i < queries.size(); ++i)
    drafts[i].tokens = lookup(queries[i].tokens, queries[i].max_tokens, queries[i].constraint);
  return drafts;
}

std::vector<int32_t> PromptLookupProposer::lookup(std::span<const int32_t> tokens, int32_t max_tokens,
                                                  SequenceConstraint* constraint) const {
  const int64_t size = int64_t(tokens.size());
  if (max_tokens <= 0) return {};
  // Under a grammar: the best cut candidate so far and how many matches were judged.
  std::vector<int32_t> best;
  int32_t judged = 0;
  // Longest n-gram first: a longer match is more likely to continue alike.
  for (int64_t n = std::min<int64_t>(max_ngram_, size - 1); n >= min_ngram_; --n) {
    const std::span<const int32_t> pattern = tokens.subspan(size_t(size - n));
    // Most recent earlier occurrence first (start <= size - n - 1, so at
    // least one token follows it).
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(pattern.begin(), pattern.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(max_tokens, size - from);
      const std::span<const int32_t> candidate = tokens.subspan(size_t(from), size_t(count));
      if (constraint == nullptr) return std::vector<int32_t>(candidate.begin(), candidate.end());
      // allowed_prefix walks the matcher and rolls it back.
      const size_t allowed = size_t(constraint->allowed_prefix(candidate));
      if (allowed == candidate.size()) return std::vector<int32_t>(candidate.begin(), candidate.end());
      if (allowed > best.size()) best.assign(candidate.begin(), candidate.begin() + int64_t(allowed));
      if (++judged == kGrammarCandidates) return best;
    }
  }
  return best;
}

}  // namespace brioche::engine
