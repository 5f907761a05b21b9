#include "server/output_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace brioche::server {
namespace {

// What a whole output parses to: content, reasoning, and the complete calls
// the streamed pieces add up to.
struct Parsed {
  std::string content, reasoning;
  std::vector<ParsedToolCall> tool_calls;
  std::vector<ToolCallDelta> pieces;
};

// Feeds `text` in pieces of `step` bytes and returns the merged result.
Parsed feed(OutputParserOptions options, const std::string& text, size_t step) {
  OutputParser parser(options);
  Parsed all;
  auto merge = [&](ParsedDelta d) {
    all.content += d.content;
    all.reasoning += d.reasoning;
    append_tool_call_pieces(all.tool_calls, d.tool_calls);
    for (auto& piece : d.tool_calls) all.pieces.push_back(piece);
  };
  for (size_t i = 0; i < text.size(); i += step) merge(parser.push(text.substr(i, step)));
  merge(parser.finish());
  return all;
}

class EveryChunking : public ::testing::TestWithParam<size_t> {};

TEST_P(EveryChunking, ReasoningIsSplitFromContent) {
  Parsed d = feed({.split_reasoning = true}, "<think>\nLet me think.\n</think>\n\nThe answer is 4.", GetParam());
  EXPECT_EQ(d.reasoning, "\nLet me think.\n");
  EXPECT_EQ(d.content, "The answer is 4.");
}

TEST_P(EveryChunking, HermesToolCallsAreParsed) {
  std::string text =
      "I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  Parsed d = feed({.tools = ToolSyntax::Hermes}, text, GetParam());
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
  Parsed d = feed({.split_reasoning = true, .tools = ToolSyntax::Hermes},
                  "<think>need weather</think>\n<tool_call>{\"name\": \"w\", \"arguments\": {\"a\": 1}}</tool_call>",
                  GetParam());
  EXPECT_EQ(d.reasoning, "need weather");
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"a\": 1}");  // as the model wrote it
}

TEST_P(EveryChunking, Llama3JsonCall) {
  Parsed d = feed({.tools = ToolSyntax::Llama3Json},
                  "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"a;b\"}}", GetParam());
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "search");
  EXPECT_EQ(nlohmann::json::parse(d.tool_calls[0].arguments)["q"], "a;b");
  Parsed two = feed({.tools = ToolSyntax::Llama3Json},
                    "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 2}}", GetParam());
  ASSERT_EQ(two.tool_calls.size(), 2u);
  EXPECT_EQ(two.tool_calls[1].name, "b");
}

TEST_P(EveryChunking, TextThatOnlyLooksLikeMarkersStaysContent) {
  std::string text = "Use <tool> and <think less> and a < b; {not json";
  Parsed d = feed({.split_reasoning = true, .tools = ToolSyntax::Hermes}, text, GetParam());
  EXPECT_EQ(d.content, text);
  EXPECT_TRUE(d.tool_calls.empty());
  Parsed j = feed({.tools = ToolSyntax::Llama3Json}, "{not json at all", GetParam());
  EXPECT_EQ(j.content, "{not json at all");
  EXPECT_TRUE(j.tool_calls.empty());
}

TEST_P(EveryChunking, BrokenToolCallIsReturnedAsContent) {
  std::string text = "<tool_call>{\"name\": oops}</tool_call>";
  Parsed d = feed({.tools = ToolSyntax::Hermes}, text, GetParam());
  EXPECT_EQ(d.content, text);
  EXPECT_TRUE(d.tool_calls.empty());
  // Unterminated at the end of output but valid JSON: still a call.
  Parsed open = feed({.tools = ToolSyntax::Hermes}, "<tool_call>{\"name\": \"f\", \"arguments\": {}}", GetParam());
  ASSERT_EQ(open.tool_calls.size(), 1u);
}

// Streaming: each call opens with one piece carrying id and name, then only
// argument fragments follow; the fragments concatenate to the arguments the
// whole text gives at once, which are the model's own text.
TEST_P(EveryChunking, ArgumentsStreamInPiecesThatAddUpToTheWholeCall) {
  std::string text =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"a}\\\"b\"}}\n</tool_call>";
  Parsed d = feed({.tools = ToolSyntax::Hermes}, text, GetParam());
  Parsed whole = feed({.tools = ToolSyntax::Hermes}, text, text.size());
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"city\": \"Paris\", \"days\": [1, 2]}");
  EXPECT_EQ(d.tool_calls[1].arguments, "{\"tz\": \"a}\\\"b\"}");
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(d.tool_calls[i].arguments, whole.tool_calls[i].arguments);
    EXPECT_EQ(d.tool_calls[i].name, whole.tool_calls[i].name);
  }
  int headers = 0;
  for (const ToolCallDelta& piece : d.pieces) {
    if (!piece.id.empty()) {
      EXPECT_EQ(piece.index, headers++);
      EXPECT_FALSE(piece.name.empty());
    } else {
      EXPECT_TRUE(piece.name.empty());
      EXPECT_FALSE(piece.arguments.empty());
    }
  }
  EXPECT_EQ(headers, 2);
  if (GetParam() < 8) {
    EXPECT_GT(d.pieces.size(), 4u);  // fragments, not one delta per call
  }
}

TEST_P(EveryChunking, Llama3CallsStreamWithDistinctIndexes) {
  std::string text =
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": \"1;2\"}}; {\"name\": \"b\", \"parameters\": {}}";
  Parsed d = feed({.tools = ToolSyntax::Llama3Json}, text, GetParam());
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"x\": \"1;2\"}");
  EXPECT_EQ(d.tool_calls[1].name, "b");
  EXPECT_EQ(d.tool_calls[1].arguments, "{}");
  EXPECT_EQ(d.content, "");
  std::vector<int> indexes;
  for (const ToolCallDelta& piece : d.pieces)
    if (!piece.id.empty()) indexes.push_back(piece.index);
  EXPECT_EQ(indexes, (std::vector<int>{0, 1}));
  EXPECT_NE(d.tool_calls[0].id, d.tool_calls[1].id);
}

TEST_P(EveryChunking, ArgumentsBeforeNameWaitForIt) {
  Parsed d = feed({.tools = ToolSyntax::Hermes},
                  "<tool_call>{\"arguments\": {\"a\": [1]}, \"name\": \"f\"}</tool_call>", GetParam());
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "f");
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"a\": [1]}");
  ASSERT_FALSE(d.pieces.empty());
  EXPECT_FALSE(d.pieces[0].id.empty());  // nothing is sent before the call is named
}

TEST_P(EveryChunking, DoubleEncodedArgumentsAreDecoded) {
  Parsed d = feed({.tools = ToolSyntax::Hermes},
                  "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", GetParam());
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"a\": 1}");
}

TEST_P(EveryChunking, CallWithoutArgumentsGetsAnEmptyObject) {
  Parsed d = feed({.tools = ToolSyntax::Hermes}, "<tool_call>{\"name\": \"now\"}</tool_call>", GetParam());
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{}");
}

TEST_P(EveryChunking, CallCutShortKeepsItsArgumentsSoFar) {
  // max_tokens inside the arguments: the call stays a call (finish_reason
  // "length" tells the client), with what was generated.
  Parsed d =
      feed({.tools = ToolSyntax::Hermes}, "<tool_call>{\"name\": \"f\", \"arguments\": {\"city\": \"Par", GetParam());
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"city\": \"Par");
  // Cut before the name: not a call, the text is content.
  Parsed unnamed = feed({.tools = ToolSyntax::Hermes}, "<tool_call>{\"na", GetParam());
  EXPECT_TRUE(unnamed.tool_calls.empty());
  EXPECT_EQ(unnamed.content, "<tool_call>{\"na");
}

TEST_P(EveryChunking, Llama3TextAfterTheCallsIsContentAndPlainJsonIsContent) {
  Parsed d = feed({.tools = ToolSyntax::Llama3Json}, "{\"name\": \"a\", \"parameters\": {}} Done.", GetParam());
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.content, "Done.");
  Parsed plain = feed({.tools = ToolSyntax::Llama3Json}, "{\"answer\": 4}", GetParam());
  EXPECT_TRUE(plain.tool_calls.empty());
  EXPECT_EQ(plain.content, "{\"answer\": 4}");
}

TEST_P(EveryChunking, StrayBracketAfterTheCallIsDropped) {
  Parsed d = feed({.tools = ToolSyntax::Hermes},
                  "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}}\n</tool_call>", GetParam());
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"a\": 1}");
  EXPECT_EQ(d.content, "");
}

INSTANTIATE_TEST_SUITE_P(Chunks, EveryChunking, ::testing::Values(1, 2, 3, 5, 7, 1000));

TEST(OutputParser, StartsInsideReasoningWhenThePromptOpenedThink) {
  Parsed d = feed({.split_reasoning = true, .starts_in_reasoning = true}, "hmm</think>Answer", 4);
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
