#include "server/output_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace brioche::server {
namespace {

// Feeds `text` in pieces of `step` bytes and returns the merged result.
ParsedDelta feed(OutputParserOptions options, const std::string& text, size_t step) {
  OutputParser parser(options);
  ParsedDelta all;
  auto merge = [&](ParsedDelta d) {
    all.content += d.content;
    all.reasoning += d.reasoning;
    for (auto& c : d.tool_calls) all.tool_calls.push_back(c);
  };
  for (size_t i = 0; i < text.size(); i += step) merge(parser.push(text.substr(i, step)));
  merge(parser.finish());
  return all;
}

class EveryChunking : public ::testing::TestWithParam<size_t> {};

TEST_P(EveryChunking, ReasoningIsSplitFromContent) {
  ParsedDelta d = feed({.split_reasoning = true}, "<think>\nLet me think.\n</think>\n\nThe answer is 4.", GetParam());
  EXPECT_EQ(d.reasoning, "\nLet me think.\n");
  EXPECT_EQ(d.content, "The answer is 4.");
}

TEST_P(EveryChunking, HermesToolCallsAreParsed) {
  std::string text =
      "I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  ParsedDelta d = feed({.tools = ToolSyntax::Hermes}, text, GetParam());
  EXPECT_EQ(d.content, "I'll check.\n");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(d.tool_calls[0].arguments), nlohmann::json({{"city", "Paris"}}));
  EXPECT_EQ(d.tool_calls[1].name, "get_time");
  EXPECT_EQ(d.tool_calls[1].arguments, "{}");
  EXPECT_NE(d.tool_calls[0].id, d.tool_calls[1].id);
  EXPECT_EQ(d.tool_calls[0].id.rfind("call_", 0), 0u);
}

TEST_P(EveryChunking, ReasoningThenToolCall) {
  ParsedDelta d = feed({.split_reasoning = true, .tools = ToolSyntax::Hermes},
                       "<think>need weather</think>\n<tool_call>{\"name\": \"w\", \"arguments\": {\"a\": 1}}</tool_call>",
                       GetParam());
  EXPECT_EQ(d.reasoning, "need weather");
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"a\":1}");
}

TEST_P(EveryChunking, Llama3JsonCall) {
  ParsedDelta d = feed({.tools = ToolSyntax::Llama3Json},
                       "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"a;b\"}}", GetParam());
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "search");
  EXPECT_EQ(nlohmann::json::parse(d.tool_calls[0].arguments)["q"], "a;b");
  ParsedDelta two = feed({.tools = ToolSyntax::Llama3Json},
                         "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 2}}", GetParam());
  ASSERT_EQ(two.tool_calls.size(), 2u);
  EXPECT_EQ(two.tool_calls[1].name, "b");
}

TEST_P(EveryChunking, TextThatOnlyLooksLikeMarkersStaysContent) {
  std::string text = "Use <tool> and <think less> and a < b; {not json";
  ParsedDelta d = feed({.split_reasoning = true, .tools = ToolSyntax::Hermes}, text, GetParam());
  EXPECT_EQ(d.content, text);
  EXPECT_TRUE(d.tool_calls.empty());
  ParsedDelta j = feed({.tools = ToolSyntax::Llama3Json}, "{not json at all", GetParam());
  EXPECT_EQ(j.content, "{not json at all");
  EXPECT_TRUE(j.tool_calls.empty());
}

TEST_P(EveryChunking, BrokenToolCallIsReturnedAsContent) {
  std::string text = "<tool_call>{\"name\": oops}</tool_call>";
  ParsedDelta d = feed({.tools = ToolSyntax::Hermes}, text, GetParam());
  EXPECT_EQ(d.content, text);
  EXPECT_TRUE(d.tool_calls.empty());
  // Unterminated at the end of output but valid JSON: still a call.
  ParsedDelta open = feed({.tools = ToolSyntax::Hermes}, "<tool_call>{\"name\": \"f\", \"arguments\": {}}", GetParam());
  ASSERT_EQ(open.tool_calls.size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Chunks, EveryChunking, ::testing::Values(1, 2, 3, 5, 7, 1000));

TEST(OutputParser, StartsInsideReasoningWhenThePromptOpenedThink) {
  ParsedDelta d = feed({.split_reasoning = true, .starts_in_reasoning = true}, "hmm</think>Answer", 4);
  EXPECT_EQ(d.reasoning, "hmm");
  EXPECT_EQ(d.content, "Answer");
}

TEST(OutputParser, StreamingHoldsBackOnlyPossibleMarkers) {
  OutputParser parser({.tools = ToolSyntax::Hermes});
  // "<tool" may begin a call and the space before it may be layout: both wait.
  EXPECT_EQ(parser.push("Hello <tool").content, "Hello");
  EXPECT_EQ(parser.push("box>").content, " <toolbox>");
}

TEST(OutputParser, SyntaxFromTemplate) {
  EXPECT_EQ(tool_syntax_for_template("... <tool_call> ..."), ToolSyntax::Hermes);
  EXPECT_EQ(tool_syntax_for_template("... <|python_tag|> ..."), ToolSyntax::Llama3Json);
}

}  // namespace
}  // namespace brioche::server
