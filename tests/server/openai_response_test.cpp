// ResponseBuilder: the SSE chunks a client sees for streamed tool calls and
// for a request cut short (timeout, shutdown), against the non-streaming body.
// GCC 12 warns about members left to their defaults in designated initializers.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "server/openai_response.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace brioche::server {
namespace {

using nlohmann::json;

// The JSON payloads of `data:` lines ("[DONE]" as a string).
std::vector<json> sse_payloads(const std::string& text) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = text.find("data: ", pos)) != std::string::npos) {
    size_t end = text.find("\n\n", pos);
    std::string data = text.substr(pos + 6, end - pos - 6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
    pos = end;
  }
  return out;
}

// Runs `text` through a builder as events of `step` bytes, ending with `finish`.
std::string run_events(ResponseBuilder& builder, const std::string& text, size_t step, engine::FinishReason finish) {
  std::string sse;
  for (size_t i = 0; i < text.size(); i += step) {
    engine::GenerationEvent e;
    e.text = text.substr(i, step);
    e.tokens = {1};
    sse += builder.on_event(e);
  }
  engine::GenerationEvent last;
  last.finish = finish;
  last.done = true;
  last.usage = {.prompt_tokens = 5, .completion_tokens = int32_t(text.size() / step)};
  sse += builder.on_event(last);
  return sse;
}

ResponseContext chat_context(bool stream) {
  return {.endpoint = Endpoint::ChatCompletions,
          .model = "m",
          .stream = stream,
          .parser = {.split_reasoning = true, .tools = ToolSyntax::Hermes}};
}

const std::string kTwoCalls =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"C\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>";

TEST(ResponseBuilder, StreamedToolCallsHaveOpenAiDeltaShapeAndAddUpToTheBody) {
  ResponseBuilder streamed(chat_context(true));
  std::vector<json> chunks = sse_payloads(run_events(streamed, kTwoCalls, 3, engine::FinishReason::Stop));
  std::map<int, json> calls;  // index -> {id, name, arguments}
  std::map<int, int> fragments;
  std::string finish_reason;
  for (const json& chunk : chunks) {
    if (chunk == "[DONE]") continue;
    const json& choice = chunk["choices"][0];
    if (!choice["finish_reason"].is_null()) finish_reason = choice["finish_reason"];
    if (!choice["delta"].contains("tool_calls")) continue;
    std::map<int, int> seen_in_chunk;
    for (const json& tc : choice["delta"]["tool_calls"]) {
      int index = tc["index"];
      EXPECT_EQ(++seen_in_chunk[index], 1) << "one entry per call per chunk";
      if (!calls.count(index)) {
        // First delta of a call: index, id, type and function.name.
        ASSERT_TRUE(tc.contains("id"));
        EXPECT_EQ(tc["type"], "function");
        calls[index] = {{"id", tc["id"]}, {"name", tc["function"]["name"]}, {"arguments", tc["function"]["arguments"]}};
      } else {
        // Later deltas: only index and an arguments fragment.
        EXPECT_FALSE(tc.contains("id"));
        EXPECT_FALSE(tc.contains("type"));
        EXPECT_FALSE(tc["function"].contains("name"));
        calls[index]["arguments"] =
            calls[index]["arguments"].get<std::string>() + tc["function"]["arguments"].get<std::string>();
      }
      ++fragments[index];
    }
  }
  EXPECT_EQ(finish_reason, "tool_calls");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_GT(fragments[0], 3);  // streamed in pieces, not one delta

  ResponseBuilder whole(chat_context(false));
  run_events(whole, kTwoCalls, kTwoCalls.size(), engine::FinishReason::Stop);
  json message = whole.final_body()["choices"][0]["message"];
  ASSERT_EQ(message["tool_calls"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(calls[i]["name"], message["tool_calls"][i]["function"]["name"]);
    EXPECT_EQ(calls[i]["arguments"], message["tool_calls"][i]["function"]["arguments"]);
  }
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\", \"unit\": \"C\"}");
}

TEST(ResponseBuilder, NamedCallPrefillIsAnnouncedWithTheFirstEvent) {
  ResponseContext ctx = chat_context(true);
  ctx.prefill = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
  ResponseBuilder builder(ctx);
  std::vector<json> chunks =
      sse_payloads(run_events(builder, "{\"city\": \"Paris\"}}\n</tool_call>", 4, engine::FinishReason::Stop));
  std::string arguments, name;
  for (const json& chunk : chunks) {
    if (chunk == "[DONE]" || !chunk["choices"][0]["delta"].contains("tool_calls")) continue;
    for (const json& tc : chunk["choices"][0]["delta"]["tool_calls"]) {
      if (tc.contains("id")) name = tc["function"]["name"];
      arguments += tc["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(arguments, "{\"city\": \"Paris\"}");
}

TEST(ResponseBuilder, TimeoutMidStreamEndsWithAnErrorEventNotAFinishReason) {
  ResponseBuilder builder(chat_context(true));
  builder.set_cancel_error({.status = 408,
                            .message = "the request exceeded the server's per-request timeout of 0.5 s",
                            .type = "timeout_error",
                            .param = "",
                            .code = "timeout"});
  std::vector<json> chunks = sse_payloads(run_events(builder, "Once upon a time", 4, engine::FinishReason::Cancelled));
  ASSERT_GE(chunks.size(), 3u);
  for (const json& chunk : chunks) {
    if (chunk == "[DONE]" || chunk.contains("error")) continue;
    EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null()) << chunk.dump();
  }
  EXPECT_EQ(chunks.back(), "[DONE]");
  const json& error = chunks[chunks.size() - 2];
  ASSERT_TRUE(error.contains("error")) << error.dump();
  EXPECT_EQ(error["error"]["code"], "timeout");
  EXPECT_EQ(error["error"]["type"], "timeout_error");
  EXPECT_TRUE(builder.cancelled());
  EXPECT_EQ(builder.cancel_error().status, 408);
}

TEST(ResponseBuilder, CutStreamWithUsageSendsTheUsageBeforeTheError) {
  ResponseContext ctx = chat_context(true);
  ctx.include_usage = true;
  ResponseBuilder builder(ctx);
  builder.set_cancel_error(
      {.status = 408, .message = "timeout", .type = "timeout_error", .param = "", .code = "timeout"});
  std::vector<json> chunks = sse_payloads(run_events(builder, "Once upon a time", 4, engine::FinishReason::Cancelled));
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks[chunks.size() - 3]["usage"]["completion_tokens"], 4);  // the tokens generated before the cut
  EXPECT_EQ(chunks[chunks.size() - 2]["error"]["code"], "timeout");
  EXPECT_EQ(chunks.back(), "[DONE]");
}

TEST(ResponseBuilder, ShutdownMidStreamIsAnErrorTooAndCompletionsHaveNoFinishReason) {
  ResponseBuilder builder({.endpoint = Endpoint::Completions, .model = "m", .stream = true});
  std::vector<json> chunks = sse_payloads(run_events(builder, "abc", 1, engine::FinishReason::Cancelled));
  for (const json& chunk : chunks) {
    if (chunk == "[DONE]" || chunk.contains("error")) continue;
    EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  }
  EXPECT_EQ(chunks[chunks.size() - 2]["error"]["code"], "shutting_down");
}

TEST(ResponseBuilder, ResponsesStreamCutShortFails) {
  ResponseBuilder builder({.endpoint = Endpoint::Responses, .model = "m", .stream = true});
  builder.set_cancel_error(
      {.status = 408, .message = "timeout", .type = "timeout_error", .param = "", .code = "timeout"});
  std::string sse = builder.stream_prelude() + run_events(builder, "Once upon", 3, engine::FinishReason::Cancelled);
  EXPECT_EQ(sse.find("response.completed"), std::string::npos);
  std::vector<json> events = sse_payloads(sse);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["type"], "response.failed");
  EXPECT_EQ(events.back()["response"]["status"], "failed");
  EXPECT_EQ(events.back()["response"]["error"]["code"], "timeout");
}

// echo + logprobs (lm-evaluation-harness's loglikelihood call): the prompt's
// tokens come first, the first with null logprob and alternatives (OpenAI's
// shape), offsets from the start of the echoed text, then generated tokens.
engine::TokenLogprob token_logprob(int32_t id, std::string text, float logprob, std::vector<engine::TopLogprob> top) {
  return {.token = id, .text = std::move(text), .logprob = logprob, .top = std::move(top)};
}

engine::GenerationEvent echo_event() {
  engine::GenerationEvent e;
  e.prompt_logprobs = {token_logprob(2, " b", -1.5f, {{.token = 7, .text = " x", .logprob = -0.5f}}),
                       token_logprob(3, " c", -0.25f, {{.token = 3, .text = " c", .logprob = -0.25f}})};
  e.text = "!";
  e.tokens = {9};
  e.logprobs = {token_logprob(9, "!", -2.0f, {{.token = 9, .text = "!", .logprob = -2.0f}})};
  e.finish = engine::FinishReason::Length;
  e.done = true;
  e.usage = {.prompt_tokens = 3, .completion_tokens = 1};
  return e;
}

TEST(ResponseBuilder, EchoWithLogprobsListsThePromptTokensFirst) {
  ResponseBuilder builder({.endpoint = Endpoint::Completions,
                           .model = "m",
                           .logprobs = true,
                           .echo_text = "a b c",
                           .echo_first_token = "a"});
  builder.on_event(echo_event());
  json choice = builder.final_body()["choices"][0];
  EXPECT_EQ(choice["text"], "a b c!");
  json lp = choice["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", " b", " c", "!"}));
  EXPECT_EQ(lp["token_logprobs"], json({nullptr, -1.5, -0.25, -2.0}));
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["top_logprobs"][1], json({{" x", -0.5}}));
  EXPECT_EQ(lp["text_offset"], json({0, 1, 3, 5}));
}

TEST(ResponseBuilder, StreamedEchoSendsThePromptLogprobsInTheFirstChunk) {
  ResponseBuilder builder({.endpoint = Endpoint::Completions,
                           .model = "m",
                           .stream = true,
                           .logprobs = true,
                           .echo_text = "a b c",
                           .echo_first_token = "a"});
  std::vector<json> chunks = sse_payloads(builder.on_event(echo_event()));
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(chunks[0]["choices"][0]["logprobs"]["tokens"], json({"a", " b", " c", "!"}));
}

}  // namespace
}  // namespace brioche::server
