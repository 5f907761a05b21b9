// Token lengths as `brioche train` measures them: the prompt rendered through
// the model's chat template with the generation prompt (BOS included when the
// tokenizer adds one), each reply as the tokens the full render adds after it.
// A sequence the trainer builds is prompt + reply; its max_seq_length check
// reads prompt + the longest reply of the row. The implementation that loads
// a model's tokenizer and template lives with the CLI (cli/data_tokens.h),
// above the layers that own them.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "data/example.h"

namespace brioche::data {

struct ExchangeTokens {
  int64_t prompt = 0;
  int64_t reply = 0;
};

class TokenCounter {
 public:
  virtual ~TokenCounter() = default;
  virtual ExchangeTokens exchange(const json& prompt_messages, const json& reply_message) = 0;
  virtual int64_t text(const std::string& text) = 0;  // a text row: BOS + its tokens
  virtual std::string description() const = 0;        // which model's tokenizer and template
};

// prompt + the longest of `replies` (a text example: its text).
int64_t example_tokens(TokenCounter& counter, const Example& example, std::span<const Reply* const> replies);
int64_t example_tokens(TokenCounter& counter, const Example& example);  // over all its replies

}  // namespace brioche::data
