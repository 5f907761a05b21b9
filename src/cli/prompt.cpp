#include "cli/prompt.h"

#include "engine/engine.h"
#include "model/model.h"
#include "server/chat_prompt.h"
#include "tokenizer/tokenizer.h"

namespace brioche::cli {

namespace {

std::string token_text_or_empty(const tokenizer::Tokenizer* tok, int32_t id) {
  return tok && id >= 0 ? tok->token_text(id) : std::string();
}

}  // namespace

std::vector<int32_t> chat_prompt_tokens(const engine::Engine& engine, const nlohmann::ordered_json& messages) {
  const tokenizer::Tokenizer* tok = engine.tokenizer().get();
  const std::string bos = tok ? token_text_or_empty(tok, tok->bos_id()) : "";
  const std::string eos = tok ? token_text_or_empty(tok, tok->eos_id()) : "";
  server::ChatPrompter prompter(engine.model() ? engine.model()->chat_template() : "", bos, eos);
  const nlohmann::json plain_messages = nlohmann::json::parse(messages.dump());
  const nlohmann::json no_tools;
  std::string prompt = prompter.render({.messages = plain_messages, .tools = no_tools});
  // Templates that start with the bos text already carry it; others get it
  // from the tokenizer when the vocabulary asks for one.
  const bool add_bos = tok && tok->add_bos() && (bos.empty() || prompt.rfind(bos, 0) != 0);
  return engine.tokenize(prompt, {.add_bos = add_bos});
}

std::vector<int32_t> raw_prompt_tokens(const engine::Engine& engine, const std::string& text) {
  const tokenizer::Tokenizer* tok = engine.tokenizer().get();
  return engine.tokenize(text, {.add_bos = tok && tok->add_bos()});
}

}  // namespace brioche::cli
