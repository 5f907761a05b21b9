// Parsing and validation of the OpenAI request bodies into one internal form.
//
// Unknown fields are ignored (clients send many); every known field is
// type-checked and range-checked, and a bad one is an ApiError naming it
// (`param`), what was expected and what was found.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/api_error.h"

namespace brioche::server {

enum class Endpoint { ChatCompletions, Completions, Responses };

enum class ToolChoiceMode { Auto, None, Required, Named };

struct ApiRequest {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string user;

  // Chat and responses: messages with string content (content parts joined),
  // assistant tool_calls with parsed arguments, ready for the chat template.
  nlohmann::json messages = nlohmann::json::array();
  nlohmann::json tools;  // array of {"type":"function","function":{...}} or null
  ToolChoiceMode tool_choice = ToolChoiceMode::Auto;
  std::string tool_choice_name;  // with Named
  bool parallel_tool_calls = true;
  std::optional<bool> enable_thinking;  // chat_template_kwargs.enable_thinking

  // Completions: raw prompt text, or token ids.
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;
  bool echo = false;

  bool logprobs = false;
  int top_logprobs = 0;

  engine::GenerationRequest generation;  // sampling, max_tokens (0 = unset), stop, n
  bool max_tokens_given = false;

  // Responses API: what the response object echoes back as sent
  // ({"tools", "tool_choice", "parallel_tool_calls"}).
  nlohmann::json responses_echo;
};

// What the served model accepts, for the range checks at the API boundary.
struct RequestBounds {
  int32_t vocab_size = INT32_MAX;  // token ids (prompt ids, logit_bias keys) must be below it
};

// `body` is the raw HTTP body. Throws ApiError: a body nested deeper than
// kMaxJsonDepth (core/json_limits.h), any field of the wrong type or range,
// and any token id outside [0, bounds.vocab_size), naming the field.
ApiRequest parse_api_request(Endpoint endpoint, const std::string& body, const RequestBounds& bounds = {});

}  // namespace brioche::server
