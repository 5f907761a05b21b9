#include "jobs/train_log.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace brioche::jobs {
namespace {

namespace fs = std::filesystem;

TEST(TrainLog, ReadsCompleteLinesFromAnOffset) {
  const fs::path dir = fs::temp_directory_path() / ("brioche_log_" + random_id("t"));
  fs::create_directories(dir);
  const std::string path = (dir / "log.jsonl").string();
  EXPECT_TRUE(read_log_lines(path, 0).rows.empty());  // not written yet
  {
    std::ofstream out(path);
    out << "{\"event\":\"step\",\"step\":1,\"loss\":2.5}\nnot "
           "json\n{\"event\":\"eval\",\"step\":1,\"loss\":2.0}\n{\"event\":\"st";
  }
  LogChunk first = read_log_lines(path, 0);
  ASSERT_EQ(first.rows.size(), 2u);  // the malformed line skipped, the partial one waits
  EXPECT_EQ(first.rows[1]["event"], "eval");
  {
    std::ofstream out(path, std::ios::app);
    out << "ep\",\"step\":2,\"loss\":1.5}\n";
  }
  LogChunk second = read_log_lines(path, first.next_offset);
  ASSERT_EQ(second.rows.size(), 1u);
  EXPECT_EQ(second.rows[0]["step"], 2);
  EXPECT_EQ(second.next_offset, int64_t(fs::file_size(path)));
  {
    std::ofstream out(path);  // started over (--overwrite)
    out << "{\"event\":\"step\",\"step\":1,\"loss\":9}\n";
  }
  LogChunk restarted = read_log_lines(path, second.next_offset);
  ASSERT_EQ(restarted.rows.size(), 1u);
  EXPECT_EQ(restarted.rows[0]["loss"], 9);

  std::optional<MetricRow> m = metric_row(first.rows[0]);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->kind, "step");
  EXPECT_EQ(m->row["kind"], "step");
  EXPECT_FALSE(m->row.contains("event"));
  EXPECT_FALSE(metric_row({{"event", "other"}, {"step", 1}}));
  EXPECT_FALSE(metric_row({{"event", "step"}}));
  EventRecord e = metric_event("ftjob-x", *m, 10);
  EXPECT_EQ(e.type, "metrics");
  EXPECT_EQ(e.message, "step 1/10: loss 2.5000");
  EXPECT_EQ(e.data["train_loss"], 2.5);
  EXPECT_EQ(e.data["total_steps"], 10);
  fs::remove_all(dir);
}

TEST(TrainLog, CheckpointsAndStderrTail) {
  const fs::path dir = fs::temp_directory_path() / ("brioche_ck_" + random_id("t"));
  fs::create_directories(dir / "checkpoints" / "step_10");
  fs::create_directories(dir / "checkpoints" / "step_2");
  fs::create_directories(dir / "checkpoints" / "step_x");
  std::ofstream(dir / "checkpoints" / "step_2" / "trainer_state.json") << "{}";
  auto found = checkpoints(dir.string());
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].first, 2);
  EXPECT_EQ(found[1].first, 10);
  // step_10 has no trainer state: not resumable.
  EXPECT_EQ(newest_checkpoint(dir.string()), (dir / "checkpoints" / "step_2").string());
  std::ofstream(dir / "stderr.log") << "line one\nline two\nthe error\n";
  EXPECT_EQ(file_tail((dir / "stderr.log").string(), 1000), "line one\nline two\nthe error");
  EXPECT_EQ(file_tail((dir / "stderr.log").string(), 12), "the error");
  EXPECT_EQ(file_tail((dir / "nope.log").string(), 12), "");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace brioche::jobs
