// `brioche train`'s evaluation controls through the program on the default
// model: a seeded test split evaluated once at the end (metrics.json "test"
// and the last line), evaluations capped at --eval-batches, keep-best on
// --metric-for-best; bad combinations are refused with exit 2 and a message.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/run_brioche.h"

namespace brioche::cli {
namespace {

namespace fs = std::filesystem;

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end - (start == std::string::npos ? 0 : start + 1) + 1);
}

TEST(CliTrainEvaluation, TestSplitEvalBatchesAndKeepBestOnAMetric) {
  if (!fs::exists(default_model_path())) GTEST_SKIP() << "skipped: default model not installed";
  const fs::path root = fs::temp_directory_path() / "brioche_cli_train_evaluation";
  fs::remove_all(root);
  fs::create_directories(root / "data");
  {
    std::ofstream train(root / "data" / "train.jsonl"), valid(root / "data" / "valid.jsonl");
    for (int i = 0; i < 12; ++i)
      train << R"({"prompt": "Repeat: word )" << i << R"(", "completion": " WORD )" << i << "\"}\n";
    for (int i = 12; i < 16; ++i)
      valid << R"({"prompt": "Repeat: word )" << i << R"(", "completion": " WORD )" << i << "\"}\n";
  }
  const fs::path out = root / "out";
  const std::vector<std::string> common = {"train",
                                           "-d",
                                           (root / "data").string(),
                                           "--num-layers",
                                           "2",
                                           "--rank",
                                           "4",
                                           "--threads",
                                           "2",
                                           "--iters",
                                           "4",
                                           "--steps-per-eval",
                                           "2",
                                           "-o",
                                           out.string()};
  std::vector<std::string> args = common;
  args.insert(args.end(), {"--test-split", "0.25", "--seed", "5", "--eval-batches", "1", "--keep-best",
                           "--metric-for-best", "eval_loss"});
  ASSERT_EQ(run_brioche(args, root / "run.log"), 0) << read_text(root / "run.log");
  const std::string said = read_text(root / "run.log");
  EXPECT_NE(said.find("3 of 12 rows"), std::string::npos) << said;
  const auto metrics = nlohmann::json::parse(read_text(out / "metrics.json"));
  ASSERT_TRUE(metrics.contains("test")) << metrics.dump();
  EXPECT_EQ(metrics["test"]["examples"], 3);
  EXPECT_EQ(metrics["test"]["step"], metrics["adapter_step"]);
  EXPECT_EQ(metrics["adapter_step"], metrics["best_metric_step"]);
  EXPECT_EQ(metrics["metric_for_best"], "eval_loss");
  for (const auto& e : metrics["evals"]) EXPECT_EQ(e["examples"], 1) << e.dump();  // one batch of one
  // The last line is the test set's verdict.
  EXPECT_EQ(last_line(said).rfind("test (3 examples, adapter of step ", 0), 0u) << said;

  // Refused with the reason: a metric SFT does not log, a test file and a split at once, a missing file.
  std::vector<std::string> bad_metric = common;
  bad_metric.insert(bad_metric.end(), {"--overwrite", "--metric-for-best", "rewards/margins", "--keep-best"});
  EXPECT_EQ(run_brioche(bad_metric, root / "bad_metric.log"), 2);
  EXPECT_NE(read_text(root / "bad_metric.log").find("expected one of loss, nll"), std::string::npos)
      << read_text(root / "bad_metric.log");
  std::vector<std::string> both = common;
  both.insert(both.end(), {"--overwrite", "--test-split", "0.25", "--test-file", (root / "data/valid.jsonl").string()});
  EXPECT_EQ(run_brioche(both, root / "both.log"), 2);
  EXPECT_NE(read_text(root / "both.log").find("not both"), std::string::npos) << read_text(root / "both.log");
  std::vector<std::string> missing = common;
  missing.insert(missing.end(), {"--overwrite", "--test-file", (root / "data/none.jsonl").string()});
  EXPECT_EQ(run_brioche(missing, root / "missing.log"), 2);
  EXPECT_NE(read_text(root / "missing.log").find("none.jsonl"), std::string::npos) << read_text(root / "missing.log");
  fs::remove_all(root);
}

}  // namespace
}  // namespace brioche::cli
