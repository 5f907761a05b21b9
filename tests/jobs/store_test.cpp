#include "jobs/store.h"

#include <filesystem>

#include <gtest/gtest.h>

namespace brioche::jobs {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("brioche_store_" + random_id("t"));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "jobs.sqlite3").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  JobRecord job(const std::string& id) {
    return JobRecord{.id = id,
                     .created_at = 100,
                     .model = "m",
                     .training_file = "file-1",
                     .method = {{"type", "orpo"}},
                     .train_config = {{"iters", 4}},
                     .method_type = "orpo",
                     .total_steps = 4,
                     .directory = "/d/" + id};
  }
  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(StoreTest, FilesPageNewestFirstAndDelete) {
  JobStore store(path_);
  for (int i = 0; i < 5; ++i)
    store.add_file({.id = "file-" + std::to_string(i),
                    .filename = "f.jsonl",
                    .bytes = i,
                    .created_at = i,
                    .purpose = "fine-tune",
                    .kind = "sft",
                    .rows = 1,
                    .path = "/p"});
  Page<FileRecord> first = store.files("", "", 2, false);
  ASSERT_EQ(first.items.size(), 2u);
  EXPECT_EQ(first.items[0].id, "file-4");
  EXPECT_TRUE(first.has_more);
  Page<FileRecord> next = store.files("", first.items.back().id, 10, false);
  ASSERT_EQ(next.items.size(), 3u);
  EXPECT_EQ(next.items[0].id, "file-2");
  EXPECT_FALSE(next.has_more);
  EXPECT_EQ(store.files("", "", 10, true).items[0].id, "file-0");
  EXPECT_TRUE(store.files("other-purpose", "", 10, false).items.empty());
  EXPECT_TRUE(store.delete_file("file-3"));
  EXPECT_FALSE(store.delete_file("file-3"));
  EXPECT_FALSE(store.file("file-3"));
  EXPECT_EQ(store.file("file-1")->bytes, 1);
}

TEST_F(StoreTest, JobsSurviveReopenWithEventsAndMetrics) {
  {
    JobStore store(path_);
    store.add_job(job("ftjob-a"));
    store.add_job(job("ftjob-b"));
    EXPECT_TRUE(store.transition("ftjob-a", {status::kQueued}, status::kRunning));
    EXPECT_FALSE(store.transition("ftjob-a", {status::kQueued}, status::kCancelled));  // not queued any more
    store.set_progress("ftjob-a", 2, 300, 1234);
    for (int i = 0; i < 5; ++i)
      store.add_event({.job_id = "ftjob-a",
                       .created_at = i,
                       .level = "info",
                       .type = "message",
                       .message = "e" + std::to_string(i)});
    store.put_metric("ftjob-a", {.kind = "step", .step = 1, .row = {{"loss", 2.0}}});
    store.put_metric("ftjob-a", {.kind = "eval", .step = 1, .row = {{"loss", 1.9}}});
    store.put_metric("ftjob-a", {.kind = "step", .step = 1, .row = {{"loss", 1.5}}});  // trained again after a resume
    store.put_metric("ftjob-a", {.kind = "step", .step = 2, .row = {{"loss", 1.0}}});
    store.set_result("ftjob-a", "ft:m::ftjob-a", {"ft:m::ftjob-a"}, 1);
  }
  JobStore store(path_);  // a restarted server
  std::optional<JobRecord> a = store.job("ftjob-a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, status::kRunning);
  EXPECT_EQ(a->step, 2);
  EXPECT_EQ(a->trained_tokens, 300);
  EXPECT_EQ(a->log_offset, 1234);
  EXPECT_EQ(a->train_config["iters"], 4);
  EXPECT_EQ(*a->fine_tuned_model, "ft:m::ftjob-a");
  EXPECT_EQ(*a->best_margin_step, 1);
  EXPECT_EQ(store.jobs_with_status(status::kQueued).size(), 1u);
  EXPECT_EQ(store.count_with_status(status::kRunning), 1);
  Page<JobRecord> jobs = store.jobs("", 1);
  ASSERT_EQ(jobs.items.size(), 1u);
  EXPECT_EQ(jobs.items[0].id, "ftjob-b");  // newest first
  EXPECT_TRUE(jobs.has_more);
  EXPECT_EQ(store.jobs("ftjob-b", 5).items[0].id, "ftjob-a");

  Page<EventRecord> events = store.events("ftjob-a", 0, 2);
  ASSERT_EQ(events.items.size(), 2u);
  EXPECT_EQ(events.items[0].message, "e4");
  EXPECT_TRUE(events.has_more);
  Page<EventRecord> older = store.events("ftjob-a", events.items.back().seq, 10);
  EXPECT_EQ(older.items.size(), 3u);
  EXPECT_FALSE(older.has_more);
  EXPECT_EQ(store.events_after("ftjob-a", older.items.back().seq, 10).size(), 4u);

  std::vector<MetricRow> rows = store.metrics("ftjob-a", -1);
  ASSERT_EQ(rows.size(), 3u);  // one row per (kind, step)
  EXPECT_EQ(rows[0].kind, "step");
  EXPECT_EQ(rows[0].row["loss"], 1.5);
  EXPECT_EQ(rows[1].kind, "eval");  // after the step row of its step
  EXPECT_EQ(store.metrics("ftjob-a", 1).size(), 1u);
}

}  // namespace
}  // namespace brioche::jobs
