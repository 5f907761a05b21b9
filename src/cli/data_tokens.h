// Token lengths of dataset rows through a model's tokenizer and chat
// template, exactly as `brioche train` splits and tokenizes them
// (train/dataset.cpp): the prompt is the render with the generation prompt,
// BOS prepended when the tokenizer adds one; a reply is what the full render
// adds after the prompt; both tokenized with special-token strings parsed.
// tests/data checks these lengths against train::load_dataset's.
#pragma once

#include <memory>
#include <string>

#include "data/token_counter.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "train/dataset.h"

namespace brioche::cli {

class ModelTokenCounter final : public data::TokenCounter {
 public:
  explicit ModelTokenCounter(const std::string& model_path);
  data::ExchangeTokens exchange(const data::json& prompt_messages, const data::json& reply_message) override;
  int64_t text(const std::string& text) override;
  std::string description() const override { return description_; }

 private:
  int64_t prompt_tokens(const std::string& rendered) const;

  model::Checkpoint checkpoint_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  train::ChatRenderer render_;
  std::string description_;
  // Replies of one row share its prompt: its last render and token count.
  std::string last_prompt_key_, last_prompt_text_;
  int64_t last_prompt_tokens_ = 0;
};

}  // namespace brioche::cli
