// Running the `brioche` program from a CLI test as a user would: a child
// process with its stdout and stderr in one log file, optionally sent SIGINT
// once its training log holds some step lines.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace brioche::cli {

// The "step" events of a training run's log.jsonl so far.
inline int count_step_events(const std::filesystem::path& log) {
  std::ifstream in(log);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find("\"event\":\"step\"") != std::string::npos;
  return n;
}

// Runs brioche with `args`, output to `log_file`; returns the exit code. With
// interrupt_after_steps > 0, sends SIGINT once `step_log` holds that many steps.
inline int run_brioche(const std::vector<std::string>& args, const std::filesystem::path& log_file,
                       int interrupt_after_steps = 0, const std::filesystem::path& step_log = {}) {
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

// What `brioche <args>` printed (stdout and stderr together) and its exit
// code, -1 when a signal ended it; `timeout` turns a hang into exit code 124.
struct BriocheOutcome {
  int exit_code = -1;
  std::string output;
};

inline BriocheOutcome run_brioche_shell(const std::string& args, int timeout_seconds = 30) {
  const std::string command = "timeout " + std::to_string(timeout_seconds) + " " + std::string(BRIOCHE_BINARY_DIR) +
                              "/brioche " + args + " 2>&1";
  BriocheOutcome outcome;
  FILE* pipe = popen(command.c_str(), "r");
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) outcome.output.append(buffer, n);
  const int status = pclose(pipe);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace brioche::cli
