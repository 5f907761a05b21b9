#include "server/openai_request.h"

#include <gtest/gtest.h>

namespace brioche::server {
namespace {

ApiError error_of(Endpoint e, const std::string& body) {
  try {
    parse_api_request(e, body);
  } catch (const ApiError& err) {
    return err;
  }
  ADD_FAILURE() << "expected an ApiError for " << body;
  return {};
}

TEST(OpenAiRequest, ChatFieldsAreReadAndUnknownOnesIgnored) {
  ApiRequest r = parse_api_request(Endpoint::ChatCompletions, R"({
    "model": "m", "messages": [{"role": "developer", "content": "sys"},
                               {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
    "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 3, "min_p": 0.1,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.2, "seed": 9,
    "logit_bias": {"42": -100}, "stop": ["x", "y"], "n": 2, "logprobs": true, "top_logprobs": 4,
    "stream": true, "stream_options": {"include_usage": true}, "user": "u", "whatever": {"nested": 1}})");
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_EQ(r.generation.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.generation.sampling.temperature, 0.5f);
  EXPECT_EQ(r.generation.sampling.top_k, 3);
  EXPECT_EQ(*r.generation.sampling.seed, 9u);
  ASSERT_EQ(r.generation.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.generation.sampling.logit_bias[0].first, 42);
  EXPECT_EQ(r.generation.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(r.generation.n, 2);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 4);
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_EQ(r.user, "u");
}

TEST(OpenAiRequest, WrongTypesAndRangesNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  for (
      Case c :
      {Case{R"({"messages": [{"role": "user", "content": "x"}], "temperature": "1"})", "temperature"},
       Case{R"({"messages": [{"role": "user", "content": "x"}], "temperature": 3})", "temperature"},
       Case{R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
       Case{R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"a": 1}})", "logit_bias"},
       Case{R"({"messages": [{"role": "user", "content": "x"}], "stop": [1]})", "stop"},
       Case{R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0].type"},
       Case{R"({"messages": []})", "messages"},
       Case{
           R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function", "function": {"name": "f"}},
                          "tools": [{"type": "function", "function": {"name": "g"}}]})",
           "tool_choice"}}) {
    ApiError e = error_of(Endpoint::ChatCompletions, c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_FALSE(e.message.empty());
  }
  EXPECT_EQ(error_of(Endpoint::ChatCompletions, "{oops").code, "invalid_json");
  EXPECT_EQ(error_of(Endpoint::ChatCompletions, "[1]").status, 400);
}

TEST(OpenAiRequest, EchoWithLogprobsAsksForPromptLogprobsAndMaxTokensZeroNeedsEcho) {
  // lm-evaluation-harness's loglikelihood request: echo the prompt with its logprobs.
  ApiRequest lm_eval = parse_api_request(Endpoint::Completions,
                                         R"({"prompt": [1, 2, 3], "echo": true, "logprobs": 1, "max_tokens": 1})");
  EXPECT_TRUE(lm_eval.generation.prompt_logprobs);
  EXPECT_EQ(lm_eval.top_logprobs, 1);
  // OpenAI's legacy scoring call: echo + max_tokens 0 generates nothing.
  ApiRequest zero =
      parse_api_request(Endpoint::Completions, R"({"prompt": "a b", "echo": true, "logprobs": 0, "max_tokens": 0})");
  EXPECT_EQ(zero.generation.max_tokens, 0);
  EXPECT_TRUE(zero.max_tokens_given && zero.generation.prompt_logprobs);
  EXPECT_FALSE(
      parse_api_request(Endpoint::Completions, R"({"prompt": "a", "logprobs": 2})").generation.prompt_logprobs);
  EXPECT_FALSE(parse_api_request(Endpoint::Completions, R"({"prompt": "a", "echo": true})").generation.prompt_logprobs);
  // Without echo there is nothing to return for max_tokens 0; chat never takes it.
  EXPECT_EQ(error_of(Endpoint::Completions, R"({"prompt": "a", "max_tokens": 0})").param, "max_tokens");
  EXPECT_EQ(
      error_of(Endpoint::ChatCompletions, R"({"messages": [{"role": "user", "content": "a"}], "max_tokens": 0})").param,
      "max_tokens");
}

TEST(OpenAiRequest, CompletionsAndResponses) {
  ApiRequest c = parse_api_request(Endpoint::Completions, R"({"prompt": "hi", "logprobs": 3, "echo": true})");
  EXPECT_EQ(c.prompt, "hi");
  EXPECT_EQ(c.generation.max_tokens, 16);  // OpenAI's default
  EXPECT_TRUE(c.logprobs && c.echo);
  EXPECT_EQ(c.top_logprobs, 3);
  ApiRequest ids = parse_api_request(Endpoint::Completions, R"({"prompt": [1, 2, 3]})");
  EXPECT_EQ(ids.prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));
  ApiRequest batch_of_one = parse_api_request(Endpoint::Completions, R"({"prompt": [[1, 2, 3]]})");
  EXPECT_EQ(batch_of_one.prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(error_of(Endpoint::Completions, R"({"prompt": [[1, "x"]]})").param, "prompt[0][1]");
  EXPECT_EQ(error_of(Endpoint::Completions, R"({"prompt": [[1], [2]]})").param, "prompt");
  ApiRequest r = parse_api_request(Endpoint::Responses,
                                   R"({"input": [{"role": "user", "content": [{"type": "input_text", "text": "q"}]}],
                                       "instructions": "be nice", "max_output_tokens": 5})");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "q");
  EXPECT_EQ(r.generation.max_tokens, 5);
  EXPECT_EQ(error_of(Endpoint::Responses, R"({"input": 5})").param, "input");
}

TEST(OpenAiRequest, ToolsAndAssistantToolCalls) {
  ApiRequest r = parse_api_request(Endpoint::ChatCompletions, R"({
    "messages": [{"role": "user", "content": "w?"},
                 {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                   "function": {"name": "w", "arguments": "{\"city\": \"Paris\"}"}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
    "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}],
    "tool_choice": "required"})");
  EXPECT_EQ(r.tool_choice, ToolChoiceMode::Required);
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");  // parsed for templates
  EXPECT_EQ(r.messages[2]["tool_call_id"], "c1");
  ASSERT_TRUE(r.tools.is_array());
  EXPECT_EQ(r.tools[0]["function"]["name"], "w");
}

}  // namespace
}  // namespace brioche::server
