// The tokenizer endpoints vLLM serves next to the OpenAI API, so clients that
// tokenize on the server work against brioche (lm-evaluation-harness's
// "remote" tokenizer backend computes loglikelihood context lengths with them):
//   POST /tokenize    {"prompt": str, "add_special_tokens": bool} -> {"tokens": [...], "count", "max_model_len"}
//   POST /detokenize  {"tokens": [...]}                           -> {"prompt": str}
//   GET  /tokenizer_info                                           -> {"eos_token", "bos_token", "chat_template", ...}
// Each throws ApiError (400) naming the field that is wrong.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace brioche::engine {
class Engine;
}

namespace brioche::server {

nlohmann::json tokenize_response(const engine::Engine& engine, const std::string& body);
nlohmann::json detokenize_response(const engine::Engine& engine, const std::string& body);
nlohmann::json tokenizer_info_response(const engine::Engine& engine);

}  // namespace brioche::server
