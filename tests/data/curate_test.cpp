// `brioche data curate` against tools/oracle/data_goldens.py (an independent
// implementation of docs/data.md's rules): the drop counts per reason, the
// lines dropped, and every kept pair of train and valid, exactly.
#include <gtest/gtest.h>

#include "data/curate.h"
#include "data_golden.h"

namespace brioche::data {
namespace {

CurateOptions options_of(const json& g) {
  const json& o = g["options"];
  CurateOptions c;
  if (o.value("selection", "") == "best-vs-random") c.selection = PairSelection::BestVsRandom;
  c.seed = o.value("seed", uint64_t(0));
  c.min_gap = o.value("min_gap", 0.0);
  c.max_length_ratio = o.value("max_ratio", 0.0);
  c.dedup = o.value("dedup", true);
  c.valid_fraction = o.value("valid_fraction", 0.0);
  c.read.scores.source = o.value("score", std::string("auto"));
  return c;
}

void expect_matches_golden(const std::string& name) {
  SCOPED_TRACE(name);
  const json g = golden(name + ".json");
  const CurateResult r = curate(fixture(g["input"]), options_of(g));
  expect_report(r.report, g["report"]);
  EXPECT_EQ(json(r.rows.train), g["train"]);
  EXPECT_EQ(json(r.rows.valid), g["valid"]);
  EXPECT_EQ(r.stats["train"], g["train"].size());
  EXPECT_EQ(r.stats["valid"], g["valid"].size());
}

TEST(DataCurate, BestVsWorstMatchesTheReference) { expect_matches_golden("curate_default"); }
TEST(DataCurate, BestVsRandomGapRatioAndSplitMatchTheReference) { expect_matches_golden("curate_random"); }
TEST(DataCurate, FineGrainedScoresWithoutDedupMatchTheReference) { expect_matches_golden("curate_fine_no_dedup"); }
TEST(DataCurate, BinarizedLayoutMatchesTheReference) { expect_matches_golden("curate_binarized"); }

// The stats hand-checked against the fixture (tests/data/fixtures/ultrafeedback.jsonl):
// 13 lines, one blank; line 5 is not JSON, 10 has a non-list "completions", 12 no known layout.
TEST(DataCurate, StatsOfTheFixtureByHand) {
  const CurateResult r = curate(fixture("ultrafeedback.jsonl"), {});
  EXPECT_EQ(r.report.rows(), 12);
  EXPECT_EQ(r.report.kept(), 6);
  EXPECT_EQ(r.report.count("invalid_json"), 1);
  EXPECT_EQ(r.report.count("bad_row"), 2);
  EXPECT_EQ(r.report.count("tie"), 1);                  // line 2: both rated 7
  EXPECT_EQ(r.report.count("too_few_completions"), 1);  // line 8: the other is "N/A"
  EXPECT_EQ(r.report.count("duplicate_prompt"), 1);     // line 7 repeats line 1's prompt (whitespace aside)
  EXPECT_EQ(r.stats["completions"], json::parse(R"({"total": 24, "unrated": 1, "empty": 1})"));
  EXPECT_EQ(r.stats["score_source"], json::parse(R"({"overall_score": 5, "fine-grained": 1})"));
  // Line 1's best has the first of two 8.5s; line 11's empty 10-rated completion is no candidate.
  EXPECT_EQ(r.rows.train[0]["chosen"], "Red, yellow and blue are the three primary colors of paint.");
  EXPECT_EQ(r.rows.train[4]["chosen"], "Apple and banana.");
  // The bad rows say where and what.
  const auto& bad = r.report.dropped_rows();
  ASSERT_GE(bad.size(), 1u);
  EXPECT_EQ(bad[1].at.text(), "line 5");
  EXPECT_EQ(bad[1].reason, "invalid_json");
  const std::string summary = r.report.summary();
  EXPECT_NE(summary.find("line 10: bad_row: ultrafeedback row: \"completions\" must be a list, found a JSON string"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("line 12: bad_row: no known layout has keys [question, answer]"), std::string::npos)
      << summary;
}

TEST(DataCurate, StrictStopsAtTheFirstBadRow) {
  CurateOptions o;
  o.read.strict = true;
  try {
    curate(fixture("ultrafeedback.jsonl"), o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ultrafeedback.jsonl: line 5: invalid JSON"), std::string::npos) << e.what();
  }
}

TEST(DataCurate, RefusesRowsWithoutRatings) {
  const CurateResult r = curate(fixture("hh_rlhf.jsonl"), {});
  EXPECT_EQ(r.report.kept(), 0);
  EXPECT_EQ(r.report.count("bad_row"), 5);
  EXPECT_NE(r.report.summary().find("has no ratings to curate"), std::string::npos);
}

TEST(DataCurate, OptionsAreChecked) {
  EXPECT_THROW(curate(fixture("ultrafeedback.jsonl"), {.max_tokens = 100}), Error);  // no tokenizer
  EXPECT_THROW(curate(fixture("ultrafeedback.jsonl"), {.max_length_ratio = 0.5}), Error);
  EXPECT_THROW(curate(fixture("ultrafeedback.jsonl"), {.valid_fraction = 1.0}), Error);
}

TEST(DataCurate, Utf8LengthCountsCodePoints) {
  EXPECT_EQ(utf8_length("abc"), 3);
  EXPECT_EQ(utf8_length("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"), 9);  // é, €, 😀
}

}  // namespace
}  // namespace brioche::data
