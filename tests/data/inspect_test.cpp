// `brioche data inspect`: distributions, the power-of-two histogram, layouts.
#include <gtest/gtest.h>

#include "data/inspect.h"
#include "data_golden.h"

namespace brioche::data {
namespace {

TEST(DataInspect, DistributionUsesNearestRank) {
  const json d = distribution({5, 1, 4, 2, 3, 10, 6, 7, 8, 9});
  EXPECT_EQ(d["n"], 10);
  EXPECT_EQ(d["min"], 1.0);
  EXPECT_EQ(d["max"], 10.0);
  EXPECT_EQ(d["mean"], 5.5);
  EXPECT_EQ(d["p50"], 5.0);  // ceil(0.5·10) = 5th value
  EXPECT_EQ(d["p90"], 9.0);
  EXPECT_EQ(d["p99"], 10.0);
  EXPECT_TRUE(distribution({}).empty());
}

TEST(DataInspect, HistogramBinsArePowersOfTwo) {
  EXPECT_EQ(length_histogram({20, 33, 40, 64, 127, 128}),
            json::parse(R"([{"from": 16, "to": 32, "rows": 1}, {"from": 32, "to": 64, "rows": 2},
                            {"from": 64, "to": 128, "rows": 2}, {"from": 128, "to": 256, "rows": 1}])"));
  EXPECT_EQ(length_histogram({3, 9}),
            json::parse(R"([{"from": 0, "to": 8, "rows": 1}, {"from": 8, "to": 16, "rows": 1}])"));
  EXPECT_TRUE(length_histogram({}).empty());
}

TEST(DataInspect, RatedFileStats) {
  const json s = inspect(fixture("ultrafeedback.jsonl"), {});
  EXPECT_EQ(s["kind"], "rated completions");
  EXPECT_EQ(s["rows"], 12);
  EXPECT_EQ(s["readable"], 9);
  EXPECT_EQ(s["layouts"], json::parse(R"({"ultrafeedback": 9})"));
  EXPECT_EQ(s["bad_rows"].size(), 3u);
  EXPECT_EQ(s["bad_rows"][0]["line"], 5);
  EXPECT_EQ(s["replies_per_row"]["max"], 5.0);
  EXPECT_EQ(s["unrated_completions"], 1);
  EXPECT_FALSE(s.contains("tokens"));
  const std::string text = inspect_text(s);
  EXPECT_NE(text.find("rows: 12 (9 readable, 3 bad)"), std::string::npos) << text;
  EXPECT_NE(text.find("line 5: invalid_json"), std::string::npos) << text;
}

TEST(DataInspect, CuratedPairsArePreferenceRowsWithScores) {
  const json s = inspect(fixture("ultrafeedback_binarized.jsonl"), {});
  EXPECT_EQ(s["kind"], "preference pairs");
  EXPECT_EQ(s["layouts"], json::parse(R"({"ultrafeedback-binarized": 3})"));
  EXPECT_EQ(s["scores"]["max"], 10.0);
  EXPECT_FALSE(s.contains("replies_per_row"));
}

TEST(DataInspect, SftFileStats) {
  const json s = inspect(fixture("sharegpt.jsonl"), {});
  EXPECT_EQ(s["kind"], "sft examples");
  EXPECT_EQ(s["readable"], 2);
  EXPECT_EQ(s["reply_chars"]["max"], 29.0);  // "Hi! How can I help you today?"
}

}  // namespace
}  // namespace brioche::data
