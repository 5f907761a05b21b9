// `brioche train` as a user stops it: Ctrl-C (SIGINT) after some steps
// writes the adapter, metrics.json and a resumable checkpoint and exits
// 130; `--resume` of that checkpoint finishes the run's steps; an output
// directory holding an earlier run is refused without --overwrite.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/common.h"

namespace brioche::cli {
namespace {

namespace fs = std::filesystem;

int count_step_events(const fs::path& log) {
  std::ifstream in(log);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find("\"event\":\"step\"") != std::string::npos;
  return n;
}

// Runs brioche with `args`, output to `log_file`; returns the exit code.
int run(const std::vector<std::string>& args, const fs::path& log_file, int interrupt_after_steps = 0,
        const fs::path& step_log = {}) {
  const std::string binary = std::string(BRIOCHE_BINARY_DIR) + "/brioche";
  pid_t pid = fork();
  if (pid == 0) {
    FILE* out = std::freopen(log_file.c_str(), "w", stderr);
    (void)out;
    dup2(STDERR_FILENO, STDOUT_FILENO);
    std::vector<char*> argv{const_cast<char*>(binary.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  if (interrupt_after_steps > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (count_step_events(step_log) < interrupt_after_steps && std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;  // ended early
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid, SIGINT);
  }
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

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
  const int code = run(first, root / "first.log", 3, out / "log.jsonl");
  const std::string said = read(root / "first.log");
  ASSERT_EQ(code, 130) << said;
  EXPECT_NE(said.find("continue with --resume"), std::string::npos) << said;
  EXPECT_TRUE(fs::exists(out / "adapter_model.safetensors"));
  const auto metrics = nlohmann::json::parse(read(out / "metrics.json"));
  EXPECT_TRUE(metrics["interrupted"].get<bool>());
  const int stopped_at = metrics["steps"].get<int>();
  EXPECT_GE(stopped_at, 3);
  EXPECT_LT(stopped_at, 200);
  const fs::path checkpoint = out / "checkpoints" / ("step_" + std::to_string(stopped_at));
  ASSERT_TRUE(fs::exists(checkpoint / "trainer_state.json")) << said;

  // The same --output again: refused, naming the ways on.
  std::vector<std::string> again = common;
  again.insert(again.end(), {"--iters", "2"});
  EXPECT_EQ(run(again, root / "again.log"), 2);
  EXPECT_NE(read(root / "again.log").find("--overwrite"), std::string::npos) << read(root / "again.log");

  // Resume: the remaining steps, from where it stopped.
  std::vector<std::string> resume = common;
  resume.insert(resume.end(), {"--iters", "12", "--resume", checkpoint.string()});
  // (--iters 12 after the first run's 200: a resume may also shorten the run; the schedule follows the new total)
  EXPECT_EQ(run(resume, root / "resume.log"), 0) << read(root / "resume.log");
  const auto done = nlohmann::json::parse(read(out / "metrics.json"));
  EXPECT_EQ(done["steps"].get<int>(), 12) << read(root / "resume.log");
  EXPECT_FALSE(done["interrupted"].get<bool>());
  EXPECT_NE(read(root / "resume.log").find("resuming"), std::string::npos);

  // --overwrite replaces the earlier run.
  std::vector<std::string> overwrite = common;
  overwrite.insert(overwrite.end(), {"--iters", "2", "--overwrite"});
  EXPECT_EQ(run(overwrite, root / "overwrite.log"), 0) << read(root / "overwrite.log");
  EXPECT_FALSE(fs::exists(out / "checkpoints"));
  EXPECT_EQ(nlohmann::json::parse(read(out / "metrics.json"))["steps"].get<int>(), 2);
}

}  // namespace
}  // namespace brioche::cli
