#include "server/tokenize_routes.h"

#include "core/json_limits.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/api_error.h"
#include "tokenizer/tokenizer.h"

namespace brioche::server {

using json = nlohmann::json;

namespace {

json parse_object(const std::string& body) {
  json parsed = try_parse_json_bounded(body);
  if (parsed.is_discarded()) throw status_error(400, "the request body is not valid JSON");
  if (!parsed.is_object())
    throw status_error(400, "the request body must be a JSON object, got " + std::string(parsed.type_name()));
  return parsed;
}

}  // namespace

json tokenize_response(const engine::Engine& engine, const std::string& body) {
  json request = parse_object(body);
  auto prompt = request.find("prompt");
  if (prompt == request.end() || !prompt->is_string())
    throw invalid_param("prompt", "'prompt' must be a string, got " +
                                      std::string(prompt == request.end() ? "nothing" : prompt->type_name()));
  bool add_special = false;
  if (auto a = request.find("add_special_tokens"); a != request.end() && !a->is_null()) {
    if (!a->is_boolean())
      throw invalid_param("add_special_tokens", "'add_special_tokens' must be a boolean, got " + a->dump());
    // As vLLM: add_special_tokens means the tokenizer's own rule (bos when the model adds one).
    add_special = a->get<bool>() && engine.tokenizer() && engine.tokenizer()->add_bos();
  }
  std::vector<int32_t> tokens;
  try {
    tokens = engine.tokenize(prompt->get<std::string>(), {.add_bos = add_special});
  } catch (const brioche::Error& e) {
    throw invalid_param("prompt", e.what());
  }
  return {{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", engine.context_length()}};
}

json detokenize_response(const engine::Engine& engine, const std::string& body) {
  json request = parse_object(body);
  auto tokens = request.find("tokens");
  if (tokens == request.end() || !tokens->is_array())
    throw invalid_param("tokens", "'tokens' must be an array of token ids, got " +
                                      std::string(tokens == request.end() ? "nothing" : tokens->type_name()));
  std::string text;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& t = (*tokens)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= engine.vocab_size())
      throw invalid_param("tokens", "tokens[" + std::to_string(i) + "] must be a token id in [0, " +
                                        std::to_string(engine.vocab_size()) + "), got " + t.dump());
    text += engine.codec().token_bytes(int32_t(t.get<int64_t>()));
  }
  return {{"prompt", text}};
}

json tokenizer_info_response(const engine::Engine& engine) {
  json info = {{"eos_token", nullptr},
               {"bos_token", nullptr},
               {"pad_token", nullptr},
               {"chat_template", nullptr},
               {"model_max_length", engine.context_length()},
               {"tokenizer_class", "brioche"}};
  if (const auto& tok = engine.tokenizer()) {
    if (tok->eos_id() >= 0) info["eos_token"] = tok->token_text(tok->eos_id());
    if (tok->bos_id() >= 0) info["bos_token"] = tok->token_text(tok->bos_id());
    info["add_bos_token"] = tok->add_bos();
  }
  if (engine.model() && !engine.model()->chat_template().empty())
    info["chat_template"] = engine.model()->chat_template();
  return info;
}

}  // namespace brioche::server
