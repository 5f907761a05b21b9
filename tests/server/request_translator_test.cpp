// translate_request without HTTP, on the default model (SmolLM2-135M-Instruct):
// every id a request names is range-checked, nesting is bounded, the tool
// prefill escapes the name, and the defaults the server relies on hold.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "server/request_translator.h"
#include "server/tokenize_routes.h"
#include "tokenizer/tokenizer.h"
#include "model/model.h"
#include "model/testing_paths.h"

namespace brioche::server {
namespace {

using model::default_model_path;
using nlohmann::json;

class TranslatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(default_model_path())) return;
    engine_ = engine::Engine::load({.model_path = default_model_path()}).release();
    auto tok = engine_->tokenizer();
    prompter_ = new ChatPrompter(engine_->model()->chat_template(), tok->token_text(tok->bos_id()),
                                 tok->token_text(tok->eos_id()));
    structured_ = new StructuredOutputCompiler(*engine_);
  }
  static void TearDownTestSuite() {
    delete structured_;
    delete prompter_;
    delete engine_;
  }
  void SetUp() override {
    if (engine_ == nullptr) GTEST_SKIP() << "skipped: no default model at " << default_model_path();
  }
  ServedModel served() const {
    return {.engine = *engine_, .prompter = *prompter_, .structured = *structured_, .model_id = "smol"};
  }

  // The ApiError a body gets, or a failure when it translates.
  ApiError error_of(Endpoint endpoint, const std::string& body) const {
    try {
      translate_request(served(), endpoint, body);
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << "expected an ApiError for " << body.substr(0, 200);
    return {};
  }

  static inline engine::Engine* engine_ = nullptr;
  static inline ChatPrompter* prompter_ = nullptr;
  static inline StructuredOutputCompiler* structured_ = nullptr;
};

TEST_F(TranslatorTest, TokenIdsOutsideTheVocabularyNameTheirField) {
  const std::string vocab = std::to_string(engine_->vocab_size());
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], "logit_bias": )";
  for (const std::string& bias :
       {"{\"" + vocab + "\": 1}", std::string(R"({"4294967297": 1})"), std::string(R"({"-3": 1})"),
        std::string(R"({"99999999999999999999999": 1})"), std::string(R"({"0x10": 1})")}) {
    ApiError e = error_of(Endpoint::ChatCompletions, chat + bias + "}");
    EXPECT_EQ(e.status, 400) << bias;
    EXPECT_EQ(e.param, "logit_bias") << bias;
  }
  for (const std::string& prompt : {"[1, " + vocab + "]", std::string("[4294967296]"), std::string("[-1]"),
                                    std::string("[18446744073709551615]")}) {
    ApiError e = error_of(Endpoint::Completions, R"({"prompt": )" + prompt + "}");
    EXPECT_EQ(e.status, 400) << prompt;
    EXPECT_EQ(e.param.rfind("prompt[", 0), 0u) << e.param;
    EXPECT_NE(e.message.find("outside the vocabulary"), std::string::npos) << e.message;
  }
  TranslatedRequest ok =
      translate_request(served(), Endpoint::Completions, R"({"prompt": [1, 2, 3], "logit_bias": {"0": -100}})");
  EXPECT_EQ(ok.generation.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_EQ(ok.generation.sampling.logit_bias.size(), 1u);
}

TEST_F(TranslatorTest, NestingPastTheLimitIsAClientError) {
  std::string deep = std::string(5000, '[') + std::string(5000, ']');
  ApiError body =
      error_of(Endpoint::ChatCompletions, R"({"messages": [{"role": "user", "content": "hi"}], "x": )" + deep + "}");
  EXPECT_EQ(body.status, 400);
  EXPECT_NE(body.message.find("the limit is 128"), std::string::npos) << body.message;
  std::string args = nlohmann::json(deep).dump();
  ApiError tool = error_of(
      Endpoint::ChatCompletions,
      R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": )" +
          args + R"(}}]}, {"role": "user", "content": "hi"}]})");
  EXPECT_EQ(tool.param, "messages[0].tool_calls[0].function.arguments");
}

TEST_F(TranslatorTest, UnknownModelIs404) {
  ApiError e =
      error_of(Endpoint::ChatCompletions, R"({"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_NO_THROW(translate_request(served(), Endpoint::ChatCompletions,
                                    R"({"model": "smol", "messages": [{"role": "user", "content": "hi"}]})"));
}

TEST_F(TranslatorTest, NamedToolPrefillEscapesTheName) {
  TranslatedRequest t = translate_request(served(), Endpoint::ChatCompletions, R"({
    "messages": [{"role": "user", "content": "call it"}],
    "tools": [{"type": "function", "function": {"name": "say\"hi", "parameters": {"type": "object"}}}],
    "tool_choice": {"type": "function", "function": {"name": "say\"hi"}}})");
  EXPECT_EQ(t.response.prefill, "<tool_call>\n{\"name\": \"say\\\"hi\", \"arguments\": ");
  std::string prompt = engine_->tokenizer()->decode(t.generation.prompt_tokens);
  EXPECT_NE(prompt.find(R"({"name": "say\"hi", "arguments": )"), std::string::npos);
  EXPECT_TRUE(t.generation.constraint.compiled) << "the named call is constrained to its parameters";
}

TEST_F(TranslatorTest, MaxTokensDefaults) {
  TranslatedRequest chat =
      translate_request(served(), Endpoint::ChatCompletions, R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(chat.generation.max_tokens, engine_->context_length() - int32_t(chat.generation.prompt_tokens.size()));
  TranslatedRequest completion = translate_request(served(), Endpoint::Completions, R"({"prompt": "hi"})");
  EXPECT_EQ(completion.generation.max_tokens, 16);
  TranslatedRequest given =
      translate_request(served(), Endpoint::Completions, R"({"prompt": "hi", "max_tokens": 1000000})");
  EXPECT_EQ(given.generation.max_tokens, engine_->context_length() - int32_t(given.generation.prompt_tokens.size()));
}

TEST_F(TranslatorTest, BosIsAddedOnce) {
  TranslatedRequest t =
      translate_request(served(), Endpoint::ChatCompletions, R"({"messages": [{"role": "user", "content": "hi"}]})");
  // The template writes its own BOS (SmolLM2: <|im_start|>, which also opens
  // every turn): the prompt must not start with it twice.
  auto tok = engine_->tokenizer();
  const std::vector<int32_t>& ids = t.generation.prompt_tokens;
  ASSERT_GE(ids.size(), 2u);
  EXPECT_FALSE(ids[0] == tok->bos_id() && ids[1] == tok->bos_id());
}

TEST_F(TranslatorTest, EchoOfTokenIdsIsTheirTextAndAsksForPromptLogprobs) {
  // lm-evaluation-harness sends token ids with echo + logprobs and slices the
  // returned logprobs by its own token counts.
  const std::vector<int32_t> ids = engine_->tokenize("The cat sat");
  json body = {{"prompt", ids}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 1}};
  TranslatedRequest t = translate_request(served(), Endpoint::Completions, body.dump());
  EXPECT_EQ(t.response.echo_text, "The cat sat");
  EXPECT_TRUE(t.generation.prompt_logprobs);
  EXPECT_EQ(t.generation.top_logprobs, 1);
  EXPECT_EQ(t.response.echo_first_token, engine_->codec().token_bytes(ids[0]));
  // echo + max_tokens 0 without logprobs: the prompt is still scored (the
  // engine's only work), the response has no logprobs.
  TranslatedRequest zero =
      translate_request(served(), Endpoint::Completions, R"({"prompt": "a b", "echo": true, "max_tokens": 0})");
  EXPECT_EQ(zero.generation.max_tokens, 0);
  EXPECT_TRUE(zero.generation.prompt_logprobs);
  EXPECT_EQ(zero.generation.top_logprobs, 0);
  EXPECT_FALSE(zero.response.logprobs);
  EXPECT_FALSE(zero.response.echo_first_token);
}

TEST_F(TranslatorTest, TokenizeDetokenizeAndTokenizerInfo) {
  json tokens = tokenize_response(*engine_, R"({"prompt": "Hello world", "add_special_tokens": false})");
  EXPECT_EQ(tokens["tokens"].get<std::vector<int32_t>>(), engine_->tokenize("Hello world"));
  EXPECT_EQ(tokens["count"], tokens["tokens"].size());
  EXPECT_EQ(detokenize_response(*engine_, json({{"tokens", tokens["tokens"]}}).dump())["prompt"], "Hello world");
  json info = tokenizer_info_response(*engine_);
  auto tok = engine_->tokenizer();
  EXPECT_EQ(info["eos_token"], tok->token_text(tok->eos_id()));
  // lm-eval finds the eos id by tokenizing eos_token: it must be that one token.
  EXPECT_EQ(tokenize_response(*engine_, json({{"prompt", info["eos_token"]}}).dump())["tokens"], json({tok->eos_id()}));
  EXPECT_TRUE(info["chat_template"].is_string());
  auto error_param = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return e.param;
    }
    ADD_FAILURE() << "expected an ApiError";
    return "";
  };
  EXPECT_EQ(error_param([&] { tokenize_response(*engine_, R"({"prompt": 5})"); }), "prompt");
  EXPECT_EQ(error_param([&] { tokenize_response(*engine_, R"({"prompt": "a", "add_special_tokens": "yes"})"); }),
            "add_special_tokens");
  EXPECT_EQ(error_param([&] { detokenize_response(*engine_, R"({"tokens": [1, -1]})"); }), "tokens");
  EXPECT_EQ(error_param([&] {
              detokenize_response(*engine_, json({{"tokens", {engine_->vocab_size()}}}).dump());
            }),
            "tokens");
  EXPECT_EQ(error_param([&] { detokenize_response(*engine_, "[1]"); }), "");
}

TEST(PromptOpensReasoning, OnlyAnOpenThinkBlockAtTheEnd) {
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(prompt_opens_reasoning("x<think>"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<think>\nsome text"));
  EXPECT_FALSE(prompt_opens_reasoning("no reasoning here"));
}

}  // namespace
}  // namespace brioche::server
