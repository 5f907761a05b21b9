#include "server/jobs_api.h"

#include <gtest/gtest.h>

#include "server/api_error.h"

namespace brioche::server {
namespace {

TEST(JobsApi, FilenamesArePlainNames) {
  EXPECT_EQ(filename_problem("train.jsonl"), "");
  EXPECT_EQ(filename_problem("my data (v2).jsonl"), "");
  EXPECT_NE(filename_problem(""), "");
  EXPECT_NE(filename_problem("../etc/passwd"), "");
  EXPECT_NE(filename_problem("/abs.jsonl"), "");
  EXPECT_NE(filename_problem("dir\\file.jsonl"), "");
  EXPECT_NE(filename_problem(".."), "");
  EXPECT_NE(filename_problem("a\nb"), "");
  EXPECT_NE(filename_problem(std::string(256, 'a')), "");
}

TEST(JobsApi, QueryStringsAreDecoded) {
  auto q = parse_query("model=ft%3Abase%3Ax&max_length=64&flag&a+b=c+d&&");
  EXPECT_EQ(q["model"], "ft:base:x");
  EXPECT_EQ(q["max_length"], "64");
  EXPECT_EQ(q["flag"], "");
  EXPECT_EQ(q["a b"], "c d");
  RouteRequest r{.query = q};
  EXPECT_EQ(query_int(r, "max_length", 1, 2, 100), 64);
  EXPECT_EQ(query_int(r, "absent", 7, 2, 100), 7);
  EXPECT_THROW(query_int(r, "model", 1, 0, 10), ApiError);
  r.query["n"] = "1000";
  EXPECT_THROW(query_int(r, "n", 1, 0, 10), ApiError);
}

TEST(JobsApi, RoutesItHandles) {
  EXPECT_TRUE(JobsApi::handles("/v1/files"));
  EXPECT_TRUE(JobsApi::handles("/v1/files/file-1/content"));
  EXPECT_TRUE(JobsApi::handles("/v1/fine_tuning/jobs/ftjob-1/events"));
  EXPECT_FALSE(JobsApi::handles("/v1/filesystem"));
  EXPECT_FALSE(JobsApi::handles("/v1/chat/completions"));
}

}  // namespace
}  // namespace brioche::server
