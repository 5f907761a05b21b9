// `brioche data convert` against tools/oracle/data_goldens.py, and the
// pieces it shares with curate: the split and the output files.
#include <gtest/gtest.h>

#include <filesystem>

#include "data/convert.h"
#include "data/split.h"
#include "data/source_rows.h"
#include "data_golden.h"

namespace brioche::data {
namespace {

void expect_matches_golden(const std::string& name) {
  SCOPED_TRACE(name);
  const json g = golden("convert_" + name + ".json");
  const ConvertResult r = convert(fixture(g["input"]), {});
  expect_report(r.report, g["report"]);
  EXPECT_EQ(json(r.rows.train), g["rows"]);
}

TEST(DataConvert, TrlConversationalMatchesTheReference) { expect_matches_golden("trl_conversational"); }
TEST(DataConvert, HhRlhfMatchesTheReference) { expect_matches_golden("hh_rlhf"); }
TEST(DataConvert, ShareGptMatchesTheReference) { expect_matches_golden("sharegpt"); }
TEST(DataConvert, AlpacaJsonArrayMatchesTheReference) { expect_matches_golden("alpaca"); }

TEST(DataConvert, BadRowsNameTheirLineAndWhatWasWrong) {
  const ConvertResult hh = convert(fixture("hh_rlhf.jsonl"), {});
  const std::string s = hh.report.summary();
  EXPECT_NE(s.find("line 3: bad_row: hh-rlhf row: \"chosen\" and \"rejected\" transcripts differ before the last "
                   "Assistant turn"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("line 4: bad_row: hh-rlhf row: \"chosen\" transcript must end with an Assistant turn"),
            std::string::npos)
      << s;
  const ConvertResult alpaca = convert(fixture("alpaca.json"), {});
  EXPECT_NE(alpaca.report.summary().find("item 3: bad_row: no known layout has keys [instruction]"), std::string::npos);
  // Forced, the layout names the missing key.
  ConvertOptions forced;
  forced.read.layout = Layout::Alpaca;
  EXPECT_NE(
      convert(fixture("alpaca.json"), forced).report.summary().find("item 3: bad_row: alpaca row: missing \"output\""),
      std::string::npos);
}

// A binarized row is one pair with scores (also what curate writes): convert keeps the pair, drops the scores.
TEST(DataConvert, BinarizedRowsArePairs) {
  const ConvertResult r = convert(fixture("ultrafeedback_binarized.jsonl"), {});
  EXPECT_EQ(r.report.kept(), 3);  // the tie stays (convert does not judge scores); line 4's prompts differ
  EXPECT_EQ(r.report.count("bad_row"), 1);
  EXPECT_EQ(json(r.rows.train[2]),
            json::parse(R"({"prompt": "Largest planet?", "chosen": "Jupiter.", "rejected": "Saturn."})"));
}

TEST(DataConvert, RowsOfAnotherKindAreBadRows) {
  const auto path = std::filesystem::temp_directory_path() / "brioche_data_mixed.jsonl";
  std::ofstream(path) << R"({"prompt": "p", "completion": "c"})"
                         "\n"
                      << R"({"prompt": "p", "chosen": "a", "rejected": "b"})"
                         "\n"
                      << R"({"text": "plain"})"
                         "\n";
  const ConvertResult r = convert(path.string(), {});
  EXPECT_EQ(r.report.kept(), 2);
  EXPECT_EQ(r.report.count("other_kind"), 1);
  EXPECT_NE(r.report.summary().find("line 2: other_kind: a row of preference pairs (preference) in a file of sft "
                                    "examples (completion at line 1)"),
            std::string::npos)
      << r.report.summary();
  EXPECT_THROW(convert(fixture("ultrafeedback.jsonl"), {.read = {.layout = Layout::UltraFeedback}}), Error);
}

TEST(DataConvert, DedupKeepsTheFirstRowOfEachPrompt) {
  const auto path = std::filesystem::temp_directory_path() / "brioche_data_dups.jsonl";
  std::ofstream(path) << R"({"prompt": "same", "completion": "one"})"
                         "\n"
                      << R"({"prompt": " same ", "completion": "two"})"
                         "\n";
  EXPECT_EQ(convert(path.string(), {}).report.kept(), 2);
  const ConvertResult r = convert(path.string(), {.dedup = true});
  EXPECT_EQ(r.report.kept(), 1);
  EXPECT_EQ(r.report.count("duplicate_prompt"), 1);
}

TEST(DataSplit, SeededAndExactInSize) {
  std::vector<json> rows;
  for (int i = 0; i < 10; ++i) rows.push_back(i);
  const SplitRows a = split_rows(rows, 0.3, 1), b = split_rows(rows, 0.3, 1), c = split_rows(rows, 0.3, 2);
  EXPECT_EQ(a.valid.size(), 3u);
  EXPECT_EQ(a.train.size(), 7u);
  EXPECT_EQ(json(a.valid), json(b.valid));
  EXPECT_NE(json(a.valid), json(c.valid));
  EXPECT_TRUE(std::is_sorted(a.train.begin(), a.train.end()));  // input order kept
  EXPECT_EQ(split_rows(rows, 0.99, 1).train.size(), 1u);        // never everything to valid
  EXPECT_EQ(split_rows({}, 0.5, 1).train.size(), 0u);
}

TEST(DataSplit, OutputDirectoryAndRefusals) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "brioche_data_out";
  fs::remove_all(dir);
  const OutputOptions o{.out = dir.string()};
  check_output(o, 0.5);
  const auto files = write_output(o, split_rows({json{{"text", "a"}}, json{{"text", "b"}}}, 0.5, 0), {{"k", 1}});
  ASSERT_EQ(files.size(), 3u);
  EXPECT_TRUE(fs::exists(dir / "train.jsonl") && fs::exists(dir / "valid.jsonl") && fs::exists(dir / "stats.json"));
  EXPECT_THROW(check_output(o, 0.5), Error);  // exists: --overwrite
  check_output({.out = dir.string(), .overwrite = true}, 0.0);
  EXPECT_THROW(check_output({.out = (dir / "x.jsonl").string()}, 0.1), Error);  // a split needs a directory
  int rows = 0;
  for_each_row((dir / "train.jsonl").string(), [&](SourceRow& r) { rows += r.parse_error.empty(); });
  EXPECT_EQ(rows, 1);
}

}  // namespace
}  // namespace brioche::data
