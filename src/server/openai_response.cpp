#include "server/openai_response.h"

#include <chrono>

namespace brioche::server {

using nlohmann::json;

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

namespace {

json byte_array(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(int(c));
  return out;
}

json tool_call_json(const ParsedToolCall& call) {
  return {{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

// Stop and length are answers; a cancelled or failed choice has no
// finish_reason to report (the stream ends with an error instead).
bool ended_normally(engine::FinishReason r) {
  return r == engine::FinishReason::Stop || r == engine::FinishReason::Length;
}

}  // namespace

ResponseBuilder::ResponseBuilder(ResponseContext context) : ctx_(std::move(context)) {
  const char* prefix = ctx_.endpoint == Endpoint::ChatCompletions ? "chatcmpl-"
                       : ctx_.endpoint == Endpoint::Completions   ? "cmpl-"
                                                                  : "resp_";
  id_ = random_id(prefix);
  item_id_ = random_id("msg_");
  created_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  OutputParserOptions parser =
      ctx_.endpoint == Endpoint::Completions ? OutputParserOptions{.split_reasoning = false} : ctx_.parser;
  for (int i = 0; i < ctx_.n; ++i) {
    choices_.emplace_back(parser);
    if (!ctx_.prefill.empty()) {
      ParsedDelta d = choices_.back().parser.push(ctx_.prefill);
      choices_.back().content += d.content;                     // normally empty: the prefill opens a tool call
      choices_.back().prefill_calls = std::move(d.tool_calls);  // a named call: announced with the first event
    }
    if (!ctx_.echo_text.empty()) {
      choices_.back().content = ctx_.echo_text;
      choices_.back().text_offset = ctx_.echo_text.size();
    }
  }
}

std::string ResponseBuilder::sse(const json& chunk) const { return "data: " + dump_json(chunk) + "\n\n"; }

std::string ResponseBuilder::sse_event(const std::string& type, json payload) {
  payload["type"] = type;
  payload["sequence_number"] = sequence_number_++;
  return "event: " + type + "\ndata: " + dump_json(payload) + "\n\n";
}

json ResponseBuilder::chunk_base() const {
  json c = {{"id", id_}, {"created", created_}, {"model", ctx_.model}, {"system_fingerprint", "brioche"}};
  c["object"] = ctx_.endpoint == Endpoint::ChatCompletions ? "chat.completion.chunk" : "text_completion";
  if (ctx_.include_usage) c["usage"] = nullptr;
  return c;
}

json ResponseBuilder::usage_json() const {
  if (ctx_.endpoint == Endpoint::Responses)
    return {{"input_tokens", usage_.prompt_tokens},
            {"input_tokens_details", {{"cached_tokens", usage_.cached_prompt_tokens}}},
            {"output_tokens", usage_.completion_tokens},
            {"output_tokens_details", {{"reasoning_tokens", 0}}},
            {"total_tokens", usage_.prompt_tokens + usage_.completion_tokens}};
  return {{"prompt_tokens", usage_.prompt_tokens},
          {"completion_tokens", usage_.completion_tokens},
          {"total_tokens", usage_.prompt_tokens + usage_.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage_.cached_prompt_tokens}}}};
}

std::string ResponseBuilder::finish_reason_for(const Choice& c, engine::FinishReason r) const {
  if (!c.tool_calls.empty() && r == engine::FinishReason::Stop) return "tool_calls";
  switch (r) {
    case engine::FinishReason::Stop: return "stop";
    case engine::FinishReason::Length: return "length";
    case engine::FinishReason::Cancelled: return "stop";
    case engine::FinishReason::Error: return "stop";
  }
  return "stop";
}

json ResponseBuilder::chat_logprob_entries(const engine::GenerationEvent& e) const {
  json entries = json::array();
  for (const engine::TokenLogprob& lp : e.logprobs) {
    json top = json::array();
    for (const engine::TopLogprob& t : lp.top)
      top.push_back({{"token", t.text}, {"logprob", t.logprob}, {"bytes", byte_array(t.text)}});
    entries.push_back(
        {{"token", lp.text}, {"logprob", lp.logprob}, {"bytes", byte_array(lp.text)}, {"top_logprobs", top}});
  }
  return entries;
}

void ResponseBuilder::add_completion_logprobs(Choice& c, const engine::GenerationEvent& e) {
  for (const engine::TokenLogprob& lp : e.logprobs) {
    c.lp_tokens.push_back(lp.text);
    c.lp_values.push_back(lp.logprob);
    json top = json::object();
    for (const engine::TopLogprob& t : lp.top) top[t.text] = t.logprob;
    c.lp_top.push_back(top);
    c.lp_offsets.push_back(int64_t(c.text_offset));
    c.text_offset += lp.text.size();
  }
}

// Echoed prompt tokens come first, with offsets from the start of the echoed
// text: the first token (no logprob, no alternatives: null), then each
// later prompt token's log p(t_i | t_<i) from the engine.
void ResponseBuilder::add_prompt_logprobs(Choice& c, const engine::GenerationEvent& e) {
  if (!ctx_.echo_first_token) return;
  size_t offset = 0;
  c.lp_tokens.push_back(*ctx_.echo_first_token);
  c.lp_values.push_back(nullptr);
  c.lp_top.push_back(nullptr);
  c.lp_offsets.push_back(0);
  offset += ctx_.echo_first_token->size();
  for (const engine::TokenLogprob& lp : e.prompt_logprobs) {
    c.lp_tokens.push_back(lp.text);
    c.lp_values.push_back(lp.logprob);
    json top = json::object();
    for (const engine::TopLogprob& t : lp.top) top[t.text] = t.logprob;
    c.lp_top.push_back(top);
    c.lp_offsets.push_back(int64_t(offset));
    offset += lp.text.size();
  }
  ctx_.echo_first_token.reset();  // once per response (choice 0's first event)
}

std::string ResponseBuilder::stream_prelude() {
  if (!ctx_.stream || ctx_.endpoint != Endpoint::Responses) return {};
  std::string out;
  out += sse_event("response.created", {{"response", responses_body("in_progress")}});
  out += sse_event("response.in_progress", {{"response", responses_body("in_progress")}});
  json item = {{"type", "message"},
               {"id", item_id_},
               {"status", "in_progress"},
               {"role", "assistant"},
               {"content", json::array()}};
  out += sse_event("response.output_item.added", {{"output_index", 0}, {"item", item}});
  out += sse_event("response.content_part.added",
                   {{"item_id", item_id_},
                    {"output_index", 0},
                    {"content_index", 0},
                    {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
  return out;
}

std::string ResponseBuilder::on_event(const engine::GenerationEvent& e) {
  std::string out;
  if (e.choice < 0 || e.choice >= int(choices_.size())) return out;
  Choice& c = choices_[size_t(e.choice)];
  ParsedDelta delta = c.parser.push(e.text);
  if (!c.prefill_calls.empty()) {
    // The named call's header (and any arguments in the prefill) goes first,
    // merged with this event's fragments of the same call.
    std::vector<ToolCallDelta> pieces = std::move(c.prefill_calls);
    c.prefill_calls.clear();
    merge_tool_call_pieces(pieces, std::move(delta.tool_calls));
    delta.tool_calls = std::move(pieces);
  }
  if (e.finish) {
    ParsedDelta tail = c.parser.finish();
    delta.content += tail.content;
    delta.reasoning += tail.reasoning;
    merge_tool_call_pieces(delta.tool_calls, std::move(tail.tool_calls));
  }
  c.content += delta.content;
  c.reasoning += delta.reasoning;
  append_tool_call_pieces(c.tool_calls, delta.tool_calls);
  if (e.finish) {
    c.finish_reason = finish_reason_for(c, *e.finish);
    if (*e.finish == engine::FinishReason::Error) error_ = e.error.empty() ? "generation failed" : e.error;
    if (*e.finish == engine::FinishReason::Cancelled) cancelled_ = true;
  }
  const size_t lp_start = c.lp_tokens.size();
  if (ctx_.logprobs) {
    if (ctx_.endpoint == Endpoint::Completions && e.choice == 0) add_prompt_logprobs(c, e);
    if (ctx_.endpoint == Endpoint::Completions)
      add_completion_logprobs(c, e);
    else
      for (json& entry : chat_logprob_entries(e)) c.logprobs.push_back(std::move(entry));
  }
  if (e.done) {
    usage_ = e.usage;
    done_ = true;
  }

  if (ctx_.stream) {
    switch (ctx_.endpoint) {
      case Endpoint::ChatCompletions: {
        bool has_payload = !delta.empty() || (ctx_.logprobs && !e.logprobs.empty());
        if (!c.role_sent || has_payload) {
          json d = json::object();
          if (!c.role_sent) {
            d["role"] = "assistant";
            d["content"] = "";
            c.role_sent = true;
          }
          if (!delta.content.empty()) d["content"] = delta.content;
          if (!delta.reasoning.empty()) d["reasoning_content"] = delta.reasoning;
          if (!delta.tool_calls.empty()) {
            // OpenAI's shape: a call's first delta has index, id, type and
            // function.name (and the arguments so far); later deltas only
            // index and a function.arguments fragment.
            json calls = json::array();
            for (const ToolCallDelta& piece : delta.tool_calls) {
              json tc = {{"index", piece.index}};
              if (!piece.id.empty()) {
                tc["id"] = piece.id;
                tc["type"] = "function";
                tc["function"] = {{"name", piece.name}, {"arguments", piece.arguments}};
              } else {
                tc["function"] = {{"arguments", piece.arguments}};
              }
              calls.push_back(tc);
            }
            d["tool_calls"] = calls;
          }
          json chunk = chunk_base();
          json choice = {{"index", e.choice}, {"delta", d}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
          if (ctx_.logprobs && !e.logprobs.empty()) choice["logprobs"] = {{"content", chat_logprob_entries(e)}};
          chunk["choices"] = json::array({choice});
          out += sse(chunk);
        }
        if (e.finish && ended_normally(*e.finish)) {
          json chunk = chunk_base();
          chunk["choices"] = json::array({{{"index", e.choice},
                                           {"delta", json::object()},
                                           {"logprobs", nullptr},
                                           {"finish_reason", c.finish_reason}}});
          out += sse(chunk);
        }
        break;
      }
      case Endpoint::Completions: {
        const bool finished = e.finish && ended_normally(*e.finish);
        const bool new_logprobs = ctx_.logprobs && c.lp_tokens.size() > lp_start;
        if (!delta.content.empty() || finished || new_logprobs) {
          json chunk = chunk_base();
          json choice = {{"index", e.choice},
                         {"text", delta.content},
                         {"logprobs", nullptr},
                         {"finish_reason", finished ? json(c.finish_reason) : json(nullptr)}};
          if (new_logprobs) {
            json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
            for (size_t i = lp_start; i < c.lp_tokens.size(); ++i) {
              tokens.push_back(c.lp_tokens[i]);
              values.push_back(c.lp_values[i]);
              tops.push_back(c.lp_top[i]);
              offsets.push_back(c.lp_offsets[i]);
            }
            choice["logprobs"] = {
                {"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
          }
          chunk["choices"] = json::array({choice});
          out += sse(chunk);
        }
        break;
      }
      case Endpoint::Responses: {
        if (!delta.content.empty())
          out += sse_event("response.output_text.delta", {{"item_id", item_id_},
                                                          {"output_index", 0},
                                                          {"content_index", 0},
                                                          {"delta", delta.content},
                                                          {"logprobs", json::array()}});
        break;
      }
    }
    if (done_) {
      if (ctx_.endpoint == Endpoint::Responses) {
        const Choice& c0 = choices_[0];
        json part = {{"type", "output_text"}, {"text", c0.content}, {"annotations", json::array()}};
        out += sse_event("response.output_text.done", {{"item_id", item_id_},
                                                       {"output_index", 0},
                                                       {"content_index", 0},
                                                       {"text", c0.content},
                                                       {"logprobs", json::array()}});
        out += sse_event("response.content_part.done",
                         {{"item_id", item_id_}, {"output_index", 0}, {"content_index", 0}, {"part", part}});
        const bool failed = cancelled_ || !error_.empty();
        const bool cut = failed || c0.finish_reason == "length";
        json item = {{"type", "message"},
                     {"id", item_id_},
                     {"status", cut ? "incomplete" : "completed"},
                     {"role", "assistant"},
                     {"content", json::array({part})}};
        out += sse_event("response.output_item.done", {{"output_index", 0}, {"item", item}});
        for (size_t i = 0; i < c0.tool_calls.size(); ++i) {
          const ParsedToolCall& t = c0.tool_calls[i];
          json fc = {{"type", "function_call"}, {"id", random_id("fc_")},   {"call_id", t.id},
                     {"name", t.name},          {"arguments", t.arguments}, {"status", "completed"}};
          out += sse_event("response.output_item.added", {{"output_index", int(i) + 1}, {"item", fc}});
          out += sse_event("response.output_item.done", {{"output_index", int(i) + 1}, {"item", fc}});
        }
        std::string status = failed ? "failed" : c0.finish_reason == "length" ? "incomplete" : "completed";
        out += sse_event(status == "failed"       ? "response.failed"
                         : status == "incomplete" ? "response.incomplete"
                                                  : "response.completed",
                         {{"response", responses_body(status)}});
      } else {
        if (ctx_.include_usage) {
          json chunk = chunk_base();
          chunk["choices"] = json::array();
          chunk["usage"] = usage_json();
          out += sse(chunk);
        }
        // Cut short (timeout, shutdown, engine error): an error event, which
        // OpenAI clients raise as an APIError, then [DONE] (as vLLM ends a
        // failed stream).
        if (cancelled_)
          out += "data: " + dump_json(cancel_error_.to_json()) + "\n\n";
        else if (!error_.empty())
          out += "data: " +
                 dump_json(ApiError{.status = 500, .message = error_, .type = "server_error", .param = "", .code = ""}
                               .to_json()) +
                 "\n\n";
        out += "data: [DONE]\n\n";
      }
    }
  }
  return out;
}

json ResponseBuilder::responses_body(const std::string& status) const {
  json output = json::array();
  std::string text;
  if (done_ && !choices_.empty()) {
    const Choice& c = choices_[0];
    text = c.content;
    if (!c.reasoning.empty())
      output.push_back({{"type", "reasoning"},
                        {"id", random_id("rs_")},
                        {"summary", json::array()},
                        {"content", json::array({{{"type", "reasoning_text"}, {"text", c.reasoning}}})}});
    // The message item is complete only when the response is: a reply cut
    // by max_output_tokens (or an error) is an incomplete message.
    output.push_back(
        {{"type", "message"},
         {"id", item_id_},
         {"status", status == "completed" ? "completed" : "incomplete"},
         {"role", "assistant"},
         {"content", json::array({{{"type", "output_text"}, {"text", c.content}, {"annotations", json::array()}}})}});
    for (const ParsedToolCall& t : c.tool_calls)
      output.push_back({{"type", "function_call"},
                        {"id", random_id("fc_")},
                        {"call_id", t.id},
                        {"name", t.name},
                        {"arguments", t.arguments},
                        {"status", "completed"}});
  }
  json body = {{"id", id_},
               {"object", "response"},
               {"created_at", created_},
               {"status", status},
               {"model", ctx_.model},
               {"output", output},
               {"parallel_tool_calls", true},
               {"tool_choice", "auto"},
               {"tools", json::array()},
               {"error", nullptr},
               {"incomplete_details", nullptr},
               {"usage", nullptr}};
  if (ctx_.responses_echo.is_object())
    for (const auto& [key, value] : ctx_.responses_echo.items()) body[key] = value;
  if (status == "incomplete") body["incomplete_details"] = {{"reason", "max_output_tokens"}};
  if (status == "failed")
    body["error"] = cancelled_ ? json{{"code", cancel_error_.code}, {"message", cancel_error_.message}}
                               : json{{"code", "server_error"}, {"message", error_}};
  if (done_) body["usage"] = usage_json();
  return body;
}

json ResponseBuilder::final_body() const {
  if (ctx_.endpoint == Endpoint::Responses) {
    const Choice& c0 = choices_[0];
    return responses_body(c0.finish_reason == "length" ? "incomplete" : "completed");
  }
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    if (ctx_.endpoint == Endpoint::ChatCompletions) {
      json message = {{"role", "assistant"}, {"content", c.content}};
      if (!c.tool_calls.empty()) {
        json calls = json::array();
        for (const ParsedToolCall& t : c.tool_calls) calls.push_back(tool_call_json(t));
        message["tool_calls"] = calls;
        if (c.content.empty()) message["content"] = nullptr;
      }
      if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
      json choice = {{"index", i}, {"message", message}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason}};
      if (ctx_.logprobs) choice["logprobs"] = {{"content", c.logprobs}};
      choices.push_back(choice);
    } else {
      json choice = {{"index", i}, {"text", c.content}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason}};
      if (ctx_.logprobs)
        choice["logprobs"] = {{"tokens", c.lp_tokens},
                              {"token_logprobs", c.lp_values},
                              {"top_logprobs", c.lp_top},
                              {"text_offset", c.lp_offsets}};
      choices.push_back(choice);
    }
  }
  json body = {{"id", id_},          {"created", created_},  {"model", ctx_.model}, {"system_fingerprint", "brioche"},
               {"choices", choices}, {"usage", usage_json()}};
  body["object"] = ctx_.endpoint == Endpoint::ChatCompletions ? "chat.completion" : "text_completion";
  return body;
}

}  // namespace brioche::server
