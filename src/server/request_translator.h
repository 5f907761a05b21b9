// An OpenAI request body -> the engine request that answers it and the
// context that shapes the answer. This is all the per-request CPU work of the
// server (JSON parsing, the chat template, tokenising, compiling a grammar),
// kept out of the socket code so it can run on worker threads and be tested
// without HTTP.
//
// Steps, chat and responses: parse and validate (openai_request.h) ->
// structured output (structured_output.h; its degrade path injects a system
// prompt) -> render the chat template with the tools -> open a tool call
// when tool_choice demands one (tool_format.h) -> tokenise (BOS added once)
// -> the grammar starts after any reasoning block the prompt opened ->
// max_tokens defaults to the room left in the context.
// Completions: the prompt text or ids, echo, and a grammar without a template.
#pragma once

#include <string>

#include "engine/engine.h"
#include "server/adapter_registry.h"
#include "server/chat_prompt.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/structured_output.h"
#include "server/tool_format.h"

namespace brioche::server {

// What the server serves, as the translation needs it.
struct ServedModel {
  const engine::Engine& engine;
  const ChatPrompter& prompter;
  StructuredOutputCompiler& structured;
  ToolSyntax tool_syntax = ToolSyntax::Hermes;
  std::string model_id;
  AdapterRegistry* adapters = nullptr;  // `model` may name one of these instead of model_id
};

struct TranslatedRequest {
  engine::GenerationRequest generation;  // on_events is left to the caller
  ResponseContext response;
  std::string warning;  // non-empty: structured output degraded, sent as the `Warning` header
};

// Throws ApiError (4xx) for everything the request got wrong: bad fields,
// an unknown model (404), template or tokenizer input errors, a prompt that
// does not fit the context.
TranslatedRequest translate_request(const ServedModel& served, Endpoint endpoint, const std::string& body);

// True when the rendered prompt ends inside an open reasoning block
// ("...<think>\n"): the output then starts as reasoning.
bool prompt_opens_reasoning(const std::string& prompt);

}  // namespace brioche::server
