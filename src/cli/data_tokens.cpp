#include "cli/data_tokens.h"

#include <filesystem>

#include "core/error.h"
#include "data/example.h"
#include "engine/model_tokenizer.h"

namespace brioche::cli {

ModelTokenCounter::ModelTokenCounter(const std::string& path)
    : checkpoint_(std::filesystem::is_directory(path) ? model::load_safetensors_checkpoint(path)
                                                      : model::load_gguf_checkpoint(path)),
      tokenizer_(engine::load_model_tokenizer(checkpoint_.gguf.get(), checkpoint_.directory)),
      render_(train::make_chat_renderer(checkpoint_.chat_template, *tokenizer_)) {
  description_ = std::filesystem::path(path).filename().string() +
                 (checkpoint_.chat_template.empty() ? " (no chat template: plain User/Assistant format)"
                                                    : " tokenizer and chat template");
}

int64_t ModelTokenCounter::prompt_tokens(const std::string& rendered) const {
  auto ids = tokenizer_->encode(rendered, {.add_special = false, .parse_special = true});
  const int32_t bos = tokenizer_->bos_id();
  const bool add_bos = tokenizer_->add_bos() && bos >= 0 && (ids.empty() || ids.front() != bos);
  return int64_t(ids.size()) + (add_bos ? 1 : 0);
}

data::ExchangeTokens ModelTokenCounter::exchange(const data::json& prompt, const data::json& reply) {
  try {
    const std::string key = prompt.dump();
    if (key != last_prompt_key_) {
      last_prompt_text_ = render_(prompt, true);
      last_prompt_tokens_ = prompt_tokens(last_prompt_text_);
      last_prompt_key_ = key;
    }
    data::json full = prompt;
    full.push_back(reply);
    const std::string all = render_(full, false);
    if (all.compare(0, last_prompt_text_.size(), last_prompt_text_) != 0)
      throw data::RowError("the chat template does not render the prompt as a prefix of the full conversation");
    const std::string response = all.substr(last_prompt_text_.size());
    return {.prompt = last_prompt_tokens_,
            .reply = int64_t(tokenizer_->encode(response, {.add_special = false, .parse_special = true}).size())};
  } catch (const data::RowError&) {
    throw;
  } catch (const Error& e) {
    throw data::RowError(std::string("chat template: ") + e.what());
  }
}

int64_t ModelTokenCounter::text(const std::string& text) { return prompt_tokens(text); }

}  // namespace brioche::cli
