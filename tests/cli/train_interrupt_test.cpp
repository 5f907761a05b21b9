// `brioche train` as a user stops it: Ctrl-C (SIGINT) after some steps
// writes the adapter, metrics.json and a resumable checkpoint and exits
// 130; `--resume` of that checkpoint finishes the run's steps; an output
// directory holding an earlier run is refused without --overwrite.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/run_brioche.h"

namespace brioche::cli {
namespace {

namespace fs = std::filesystem;

TEST(CliTrain, CtrlCSavesAResumableCheckpointAndResumeFinishes) {
  if (!fs::exists(default_model_path())) GTEST_SKIP() << "skipped: default model not installed";
  const fs::path root = fs::temp_directory_path() / "brioche_cli_train_interrupt";
  fs::remove_all(root);
  fs::create_directories(root / "data");
  {
    std::ofstream train(root / "data" / "train.jsonl");
    for (int i = 0; i < 12; ++i)
      train << R"({"prompt": "Repeat: word )" << i << R"(", "completion": " WORD )" << i << "\"}\n";
  }
  const fs::path out = root / "out";
  const std::vector<std::string> common = {"train",
                                           "-d",
                                           (root / "data").string(),
                                           "--num-layers",
                                           "2",
                                           "--rank",
                                           "4",
                                           "--steps-per-report",
                                           "1",
                                           "--threads",
                                           "2",
                                           "-o",
                                           out.string()};
  std::vector<std::string> first = common;
  first.insert(first.end(), {"--iters", "200"});
  const int code = run_brioche(first, root / "first.log", 3, out / "log.jsonl");
  const std::string said = read_text(root / "first.log");
  ASSERT_EQ(code, 130) << said;
  EXPECT_NE(said.find("continue with --resume"), std::string::npos) << said;
  EXPECT_TRUE(fs::exists(out / "adapter_model.safetensors"));
  const auto metrics = nlohmann::json::parse(read_text(out / "metrics.json"));
  EXPECT_TRUE(metrics["interrupted"].get<bool>());
  const int stopped_at = metrics["steps"].get<int>();
  EXPECT_GE(stopped_at, 3);
  EXPECT_LT(stopped_at, 200);
  const fs::path checkpoint = out / "checkpoints" / ("step_" + std::to_string(stopped_at));
  ASSERT_TRUE(fs::exists(checkpoint / "trainer_state.json")) << said;

  // The same --output again: refused, naming the ways on.
  std::vector<std::string> again = common;
  again.insert(again.end(), {"--iters", "2"});
  EXPECT_EQ(run_brioche(again, root / "again.log"), 2);
  EXPECT_NE(read_text(root / "again.log").find("--overwrite"), std::string::npos) << read_text(root / "again.log");

  // Resume: the remaining steps, from where it stopped.
  std::vector<std::string> resume = common;
  resume.insert(resume.end(), {"--iters", "12", "--resume", checkpoint.string()});
  // (--iters 12 after the first run's 200: a resume may also shorten the run; the schedule follows the new total)
  EXPECT_EQ(run_brioche(resume, root / "resume.log"), 0) << read_text(root / "resume.log");
  const auto done = nlohmann::json::parse(read_text(out / "metrics.json"));
  EXPECT_EQ(done["steps"].get<int>(), 12) << read_text(root / "resume.log");
  EXPECT_FALSE(done["interrupted"].get<bool>());
  EXPECT_NE(read_text(root / "resume.log").find("resuming"), std::string::npos);

  // --overwrite replaces the earlier run.
  std::vector<std::string> overwrite = common;
  overwrite.insert(overwrite.end(), {"--iters", "2", "--overwrite"});
  EXPECT_EQ(run_brioche(overwrite, root / "overwrite.log"), 0) << read_text(root / "overwrite.log");
  EXPECT_FALSE(fs::exists(out / "checkpoints"));
  EXPECT_EQ(nlohmann::json::parse(read_text(out / "metrics.json"))["steps"].get<int>(), 2);
}

}  // namespace
}  // namespace brioche::cli
