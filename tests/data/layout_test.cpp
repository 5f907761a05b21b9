// Row layouts: detection by keys and the one shape (Example) each becomes.
#include <gtest/gtest.h>

#include "data/example.h"
#include "data/train_rows.h"

namespace brioche::data {
namespace {

Layout detect(const char* row) { return *detect_layout(json::parse(row)); }

TEST(DataLayout, DetectsEachLayoutByItsKeys) {
  EXPECT_EQ(detect(R"({"prompt": "p", "chosen": "c", "rejected": "r"})"), Layout::Preference);
  EXPECT_EQ(detect(R"({"prompt": [{"role": "user", "content": "p"}], "chosen": [], "rejected": []})"),
            Layout::TrlConversational);
  EXPECT_EQ(detect(R"({"chosen": [{"role": "user", "content": "p"}], "rejected": []})"), Layout::TrlConversational);
  EXPECT_EQ(detect(R"({"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "x"})"), Layout::HhRlhf);
  EXPECT_EQ(detect(R"({"instruction": "i", "completions": []})"), Layout::UltraFeedback);
  EXPECT_EQ(detect(R"({"prompt": "p", "chosen": [], "rejected": [], "score_chosen": 1})"),
            Layout::UltraFeedbackBinarized);
  EXPECT_EQ(detect(R"({"messages": []})"), Layout::Chat);
  EXPECT_EQ(detect(R"({"conversations": []})"), Layout::ShareGpt);
  EXPECT_EQ(detect(R"({"instruction": "i", "input": "", "output": "o"})"), Layout::Alpaca);
  EXPECT_EQ(detect(R"({"prompt": "p", "completion": "c"})"), Layout::Completion);
  EXPECT_EQ(detect(R"({"text": "t"})"), Layout::Text);
  EXPECT_FALSE(detect_layout(json::parse(R"({"question": "q", "answer": "a"})")));
  EXPECT_FALSE(detect_layout(json::parse("[1, 2]")));
}

TEST(DataLayout, NamesRoundTrip) {
  for (const char* name : {"preference", "trl-conversational", "hh-rlhf", "ultrafeedback", "ultrafeedback-binarized",
                           "chat", "sharegpt", "alpaca", "completion", "text"})
    EXPECT_EQ(layout_name(*parse_layout(name)), name);
  EXPECT_FALSE(parse_layout("csv"));
}

TEST(DataLayout, HhTranscriptBecomesMessages) {
  json t =
      parse_hh_transcript("\n\nHuman: Hi there\n\nAssistant: Hello.\n\nSecond paragraph.\n\nHuman: Bye\n\nAssistant:");
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0], (json{{"role", "user"}, {"content", "Hi there"}}));
  EXPECT_EQ(t[1], (json{{"role", "assistant"}, {"content", "Hello.\n\nSecond paragraph."}}));
  EXPECT_EQ(t[2]["content"], "Bye");
  EXPECT_EQ(t[3], (json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_THROW(parse_hh_transcript("Assistant: first"), RowError);
  EXPECT_THROW(parse_hh_transcript("  "), RowError);
}

TEST(DataLayout, PreferenceRowsNormaliseThePrompt) {
  // H4's binarized rows repeat the prompt inside chosen/rejected.
  Example b = parse_example(json::parse(R"({"prompt": "Q", "chosen": [{"role": "user", "content": "Q"},
      {"role": "assistant", "content": "A"}], "rejected": [{"role": "user", "content": "Q"},
      {"role": "assistant", "content": "B"}], "score_chosen": "9", "score_rejected": 2})"),
                            Layout::UltraFeedbackBinarized);
  EXPECT_EQ(preference_row(b.prompt, b.replies[0], b.replies[1]),
            json::parse(R"({"prompt": "Q", "chosen": "A", "rejected": "B"})"));
  EXPECT_EQ(*b.replies[0].score, 9.0);
  // TRL's explicit prompt with a system message stays a message list.
  Example t =
      parse_example(json::parse(R"({"prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}],
      "chosen": [{"role": "assistant", "content": "A"}], "rejected": [{"role": "assistant", "content": "B"}]})"),
                    Layout::TrlConversational);
  EXPECT_EQ(preference_row(t.prompt, t.replies[0], t.replies[1])["prompt"].size(), 2u);
  EXPECT_THROW(parse_example(json::parse(R"({"chosen": [{"role": "user", "content": "Q"}, {"role": "assistant",
      "content": "A"}], "rejected": [{"role": "user", "content": "R"}, {"role": "assistant", "content": "B"}]})"),
                             Layout::TrlConversational),
               RowError);
}

TEST(DataLayout, UltraFeedbackScores) {
  const json row = json::parse(R"({"instruction": "Q", "completions": [
      {"response": "a", "overall_score": 7, "annotations": {"helpfulness": {"Rating": "5"}, "honesty": {"Rating": "N/A"},
       "truthfulness": {"Rating": "3"}}},
      {"response": "b", "overall_score": "6.5", "fine-grained_score": 2.5, "annotations": {"helpfulness": {"Rating": "1"}}}]})");
  Example overall = parse_example(row, Layout::UltraFeedback);
  EXPECT_EQ(overall.score_source, "overall_score");
  EXPECT_EQ(*overall.replies[0].score, 7.0);
  EXPECT_EQ(*overall.replies[1].score, 6.5);
  Example fine = parse_example(row, Layout::UltraFeedback, {.source = "fine-grained"});
  EXPECT_DOUBLE_EQ(*fine.replies[0].score, 4.0);  // mean of 5 and 3 (N/A left out)
  EXPECT_EQ(*fine.replies[1].score, 2.5);         // fine-grained_score wins over the annotations
  Example aspect = parse_example(row, Layout::UltraFeedback, {.source = "honesty"});
  EXPECT_FALSE(aspect.replies[0].score);
  EXPECT_FALSE(aspect.replies[1].score);
  EXPECT_THROW(
      parse_example(json::parse(R"({"instruction": "Q", "completions": [{"response": "a", "overall_score": "high"}]})"),
                    Layout::UltraFeedback),
      RowError);
}

TEST(DataLayout, SftRowsAsTrainReadsThem) {
  Example alpaca =
      parse_example(json::parse(R"({"instruction": "Do", "input": "this", "output": "done"})"), Layout::Alpaca);
  EXPECT_EQ(sft_row(alpaca), json::parse(R"({"prompt": "Do\n\nthis", "completion": "done"})"));
  Example share = parse_example(json::parse(R"({"conversations": [{"from": "system", "value": "S"},
      {"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]})"),
                                Layout::ShareGpt);
  EXPECT_EQ(sft_row(share), json::parse(R"({"messages": [{"role": "system", "content": "S"},
      {"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]})"));
  // OpenAI-style turns under "conversations", and Alpaca's null input.
  Example openai = parse_example(json::parse(R"({"conversations": [{"role": "user", "content": "Q"},
      {"role": "assistant", "content": "A"}]})"),
                                 Layout::ShareGpt);
  EXPECT_EQ(sft_row(openai), json::parse(R"({"prompt": "Q", "completion": "A"})"));
  EXPECT_EQ(
      sft_row(parse_example(json::parse(R"({"instruction": "Do", "input": null, "output": "done"})"), Layout::Alpaca)),
      json::parse(R"({"prompt": "Do", "completion": "done"})"));
  EXPECT_THROW(
      parse_example(
          json::parse(R"({"conversations": [{"from": "gpt", "value": "A"}, {"from": "human", "value": "Q"}]})"),
          Layout::ShareGpt),
      RowError);
}

}  // namespace
}  // namespace brioche::data
