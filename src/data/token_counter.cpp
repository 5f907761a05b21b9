#include "data/token_counter.h"

#include <algorithm>
#include <vector>

namespace brioche::data {

int64_t example_tokens(TokenCounter& counter, const Example& ex, std::span<const Reply* const> replies) {
  if (ex.layout == Layout::Text) return counter.text(ex.text);
  int64_t prompt = 0, longest = 0;
  for (const Reply* r : replies) {
    const ExchangeTokens t = counter.exchange(ex.prompt, r->message);
    prompt = t.prompt;
    longest = std::max(longest, t.reply);
  }
  return prompt + longest;
}

int64_t example_tokens(TokenCounter& counter, const Example& ex) {
  std::vector<const Reply*> all;
  for (const Reply& r : ex.replies) all.push_back(&r);
  return example_tokens(counter, ex, all);
}

}  // namespace brioche::data
