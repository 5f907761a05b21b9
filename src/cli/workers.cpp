#include "cli/workers.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "cli/common.h"
#include "core/error.h"

namespace brioche::cli {

namespace {

// This process's own command line, as it was started.
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] == '\0') {
      args.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  }
  BRIOCHE_CHECK(!args.empty(), "cannot read this program's arguments from /proc/self/cmdline");
  return args;
}

}  // namespace

pid_t start_worker(const WorkerFlags& flags, int rank, const std::string& master) {
  std::vector<std::string> args = own_arguments();
  args.insert(args.end(), {flags.rank_flag, std::to_string(rank), flags.master_flag, master});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  BRIOCHE_CHECK(pid >= 0, "fork for rank ", rank, " failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);  // rank 0 is already gone
    // The command's input and output belong to rank 0.
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::dup2(2, 1);
    ::execv("/proc/self/exe", argv.data());
    std::fprintf(stderr, "brioche: rank %d: exec of /proc/self/exe failed\n", rank);
    ::_exit(127);
  }
  return pid;
}

WorkerWatchdog::WorkerWatchdog(std::vector<pid_t> pids, std::string what)
    : workers_(std::move(pids)), what_(std::move(what)) {
  thread_ = std::thread([this] {
    using Clock = std::chrono::steady_clock;
    std::vector<pid_t> live = workers_;
    Clock::time_point stop_seen{};
    while (!live.empty()) {
      if (stopping_ && stop_seen == Clock::time_point{}) stop_seen = Clock::now();
      if (stopping_ && Clock::now() - stop_seen > std::chrono::seconds(60)) {
        for (pid_t pid : live) {
          std::fprintf(stderr, "brioche: %s (pid %d) did not exit 60 s after the stop; killed\n", what_.c_str(),
                       int(pid));
          ::kill(pid, SIGKILL);
          ::waitpid(pid, nullptr, 0);
        }
        all_ok_ = false;
        break;
      }
      for (size_t i = 0; i < live.size();) {
        int status = 0;
        if (::waitpid(live[i], &status, WNOHANG) != live[i]) {
          ++i;
          continue;
        }
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!stopping_ || !ok) {
          std::fprintf(stderr, "brioche: %s (pid %d) %s %d; stopping\n", what_.c_str(), int(live[i]),
                       WIFEXITED(status) ? "exited with status" : "was killed by signal",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
          std::fflush(nullptr);
          if (!stopping_) std::_Exit(kExitFailure);
          all_ok_ = false;
        }
        live.erase(live.begin() + long(i));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

void WorkerWatchdog::join() {
  if (thread_.joinable()) thread_.join();
}

WorkerWatchdog::~WorkerWatchdog() {
  if (thread_.joinable()) thread_.detach();  // process exit ends it
}

}  // namespace brioche::cli
