// Turns engine events into OpenAI response bodies: a final JSON object, or
// Server-Sent Events in the chunk formats of Chat Completions, Completions
// and Responses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/output_parser.h"

namespace brioche::server {

struct ResponseContext {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string model;
  bool stream = false;
  bool include_usage = false;
  int n = 1;
  bool logprobs = false;
  OutputParserOptions parser;  // chat/responses only
  std::string prefill;         // text the prompt already forced (tool_choice): parsed, not shown
  std::string echo_text;       // completions with echo: the prompt, prepended
  // completions with echo + logprobs: the prompt's first token (it has no
  // logprob: null, as OpenAI's); the engine's prompt_logprobs give the rest.
  std::optional<std::string> echo_first_token;
  nlohmann::json responses_echo;  // Responses: {"tools", "tool_choice", "parallel_tool_calls"} as the request sent them
};

// UTF-8-safe dump: invalid bytes (a token ending inside a character) become U+FFFD.
std::string dump_json(const nlohmann::json& j);

class ResponseBuilder {
 public:
  explicit ResponseBuilder(ResponseContext context);

  // SSE text to send before any event (Responses: response.created ...).
  std::string stream_prelude();
  // Consumes one event; when streaming returns SSE text to send now.
  std::string on_event(const engine::GenerationEvent& event);
  bool done() const { return done_; }
  // After done(): the JSON body (non-streaming).
  nlohmann::json final_body() const;
  const engine::Usage& usage() const { return usage_; }
  bool any_error() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  bool cancelled() const { return cancelled_; }
  // Why a cancelled request ends (the engine only says "cancelled"): the
  // session sets a timeout error before cancelling; otherwise it was the
  // shutdown. A stream already under way ends with this error as an
  // in-stream `{"error": ...}` event (Responses: `response.failed`) instead
  // of a finish_reason, which would claim a complete answer; a non-streaming
  // request answers it as the HTTP error.
  void set_cancel_error(ApiError error) { cancel_error_ = std::move(error); }
  const ApiError& cancel_error() const { return cancel_error_; }
  int64_t generated_tokens() const { return usage_.completion_tokens; }

 private:
  struct Choice {
    OutputParser parser;
    std::string content, reasoning;
    std::vector<ParsedToolCall> tool_calls;
    nlohmann::json logprobs = nlohmann::json::array();  // chat "content" entries
    // completions-style logprobs
    std::vector<std::string> lp_tokens;
    nlohmann::json lp_values = nlohmann::json::array();  // numbers; null for the prompt's first token
    nlohmann::json lp_top = nlohmann::json::array();
    std::vector<int64_t> lp_offsets;
    size_t text_offset = 0;
    std::vector<ToolCallDelta> prefill_calls;  // call pieces the prompt's prefill announced, sent with the first event
    bool role_sent = false;
    std::string finish_reason;
    explicit Choice(OutputParserOptions o) : parser(o) {}
  };

  std::string finish_reason_for(const Choice& c, engine::FinishReason r) const;
  nlohmann::json chat_logprob_entries(const engine::GenerationEvent& e) const;
  void add_completion_logprobs(Choice& c, const engine::GenerationEvent& e);
  void add_prompt_logprobs(Choice& c, const engine::GenerationEvent& e);
  std::string sse(const nlohmann::json& chunk) const;
  std::string sse_event(const std::string& type, nlohmann::json payload);
  nlohmann::json chunk_base() const;
  nlohmann::json usage_json() const;
  nlohmann::json responses_body(const std::string& status) const;

  ResponseContext ctx_;
  std::string id_;
  std::string item_id_;
  int64_t created_ = 0;
  std::vector<Choice> choices_;
  engine::Usage usage_;
  bool done_ = false;
  bool cancelled_ = false;
  std::string error_;
  ApiError cancel_error_{.status = 503,
                         .message = "the request was cancelled because the server is shutting down",
                         .type = "server_error",
                         .param = "",
                         .code = "shutting_down"};
  int64_t sequence_number_ = 0;
};

}  // namespace brioche::server
