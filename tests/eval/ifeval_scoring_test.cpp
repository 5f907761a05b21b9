// Scoring around the checkers: the loose variants, prompt parsing and its
// errors, tallies, saved runs read back and re-scored.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "eval/ifeval_results.h"
#include "eval/ifeval_scoring.h"

namespace brioche::eval {
namespace {

namespace fs = std::filesystem;

TEST(IfevalScoring, LooseVariantsFollowTheReferenceOrder) {
  const auto v = loose_variants("Sure:\n*a* b\nbye ");
  EXPECT_EQ(v[0], "Sure:\n*a* b\nbye ");
  EXPECT_EQ(v[1], "Sure:\na b\nbye ");
  EXPECT_EQ(v[2], "*a* b\nbye");  // first line removed, stripped
  EXPECT_EQ(v[3], "Sure:\n*a* b");
  EXPECT_EQ(v[4], "*a* b");
  EXPECT_EQ(v[5], "a b\nbye");
  EXPECT_EQ(v[6], "Sure:\na b");
  EXPECT_EQ(v[7], "a b");
  const auto one = loose_variants("single line");
  EXPECT_EQ(one[2], "");
  EXPECT_EQ(one[3], "");
  EXPECT_EQ(one[4], "");
}

TEST(IfevalScoring, BuiltinPromptsAreTheIfevalSet) {
  const auto& prompts = builtin_ifeval_prompts();
  ASSERT_EQ(prompts.size(), 541u);
  EXPECT_EQ(prompts[0].key, 1000);
  size_t instructions = 0;
  for (const auto& p : prompts) instructions += p.instruction_ids.size();
  EXPECT_EQ(instructions, 834u);  // lm-eval's inst-level denominator
  EXPECT_EQ(instruction_ids().size(), 25u);
}

TEST(IfevalScoring, StrictNeedsANonBlankResponseLooseTriesTheVariants) {
  IfevalPrompt p{
      1, "q", {"startend:quotation", "punctuation:no_comma"}, {nlohmann::json::object(), nlohmann::json::object()}};
  const PromptScorer scorer(p);
  const ResponseVerdicts blank = scorer.score("   \n");
  EXPECT_EQ(blank.strict, (std::vector<bool>{false, false}));  // no_comma holds, but a blank response follows nothing
  const ResponseVerdicts r = scorer.score("Here you go, friend:\n\"quoted\"");
  EXPECT_EQ(r.strict, (std::vector<bool>{false, false}));
  EXPECT_EQ(r.loose, (std::vector<bool>{true, true}));  // without the first line
  EXPECT_FALSE(r.prompt_strict());
  EXPECT_TRUE(r.prompt_loose());
  const IfevalAccuracy acc = tally({p, p}, {blank, r});
  EXPECT_EQ(acc.prompts, 2);
  EXPECT_EQ(acc.instructions, 4);
  EXPECT_EQ(acc.prompt_loose, 1);
  EXPECT_EQ(acc.inst_loose, 2);
  EXPECT_DOUBLE_EQ(acc.inst_loose_acc(), 0.5);
  EXPECT_EQ(acc.per_instruction.at("startend:quotation").total, 2);
}

std::string error_of(const std::string& jsonl) {
  try {
    parse_ifeval_prompts(jsonl, "prompts.jsonl");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(IfevalScoring, BadPromptRowsNameTheLineAndWhatWasExpected) {
  EXPECT_NE(error_of("{\"prompt\": \"x\", \"instruction_id_list\": [\"nope:id\"], \"kwargs\": [{}]}")
                .find("prompts.jsonl:1: unknown IFEval instruction id 'nope:id'"),
            std::string::npos);
  EXPECT_NE(error_of("\n{\"prompt\": \"x\", \"instruction_id_list\": [\"keywords:frequency\"], \"kwargs\": "
                     "[{\"keyword\": \"a\"}]}")
                .find("prompts.jsonl:2: instruction keywords:frequency: kwarg 'frequency': expected a non-negative "
                      "integer, found nothing"),
            std::string::npos);
  EXPECT_NE(error_of("{\"prompt\": \"x\", \"instruction_id_list\": [\"punctuation:no_comma\"], \"kwargs\": []}")
                .find("one object per instruction"),
            std::string::npos);
  EXPECT_NE(error_of("not json").find("prompts.jsonl:1: not a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{\"prompt\": \"x\", \"instruction_id_list\": [\"length_constraints:number_words\"], \"kwargs\": "
                     "[{\"num_words\": 5, \"relation\": \"more than\"}]}")
                .find("expected \"less than\" or \"at least\", found \"more than\""),
            std::string::npos);
  EXPECT_NE(error_of("").find("no prompts"), std::string::npos);
}

TEST(IfevalResults, SavedRunsReadBackAndRescoreTheSame) {
  const fs::path dir = fs::temp_directory_path() / "brioche_ifeval_results_test";
  fs::remove_all(dir);
  IfevalRun run;
  run.label = "base";
  run.prompts = {builtin_ifeval_prompts()[0], builtin_ifeval_prompts()[1]};
  run.responses = {{"Raymond III, a count.", "stop", 7}, {"Thee shall go to Kyoto \u00e9 and Nara", "length", 9}};
  score_run(run);
  save_run(run, dir.string());
  IfevalRun other = run;
  other.label = "tuned";
  other.responses[0].text = "No commas here";
  score_run(other);
  save_run(other, dir.string());

  const std::vector<IfevalRun> runs = load_runs(dir.string());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].label, "base");
  EXPECT_EQ(runs[1].label, "tuned");
  EXPECT_EQ(runs[0].prompts[1].key, run.prompts[1].key);
  EXPECT_EQ(runs[0].responses[1].text, run.responses[1].text);
  EXPECT_EQ(runs[0].responses[1].finish_reason, "length");
  EXPECT_EQ(runs[0].responses[1].completion_tokens, 9);
  IfevalRun again = runs[1];
  score_run(again);
  EXPECT_EQ(again.accuracy.inst_strict, other.accuracy.inst_strict);
  EXPECT_EQ(again.verdicts[0].strict, other.verdicts[0].strict);
  // The saved verdicts are the scorer's.
  std::ifstream in(dir / "tuned.responses.jsonl");
  std::string line;
  std::getline(in, line);
  const auto row = nlohmann::json::parse(line);
  EXPECT_EQ(row["strict"].get<std::vector<bool>>(), other.verdicts[0].strict);
  EXPECT_THROW(load_runs((dir / "missing").string()), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace brioche::eval
