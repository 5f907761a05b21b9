#include "cli/tensor_parallel.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "core/error.h"
#include "model/llama.h"
#include "model/tensor_parallel.h"
#include "ops/collective.h"
#include "ops/rendezvous.h"

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
  BRIOCHE_CHECK(!args.empty(), "--tensor-parallel: cannot read this program's arguments from /proc/self/cmdline");
  return args;
}

// Starts rank `rank` as this program with the same arguments plus the
// hidden worker flags. The worker dies with us (PR_SET_PDEATHSIG).
pid_t start_worker(int rank, const std::string& master) {
  std::vector<std::string> args = own_arguments();
  args.insert(args.end(), {"--tp-rank", std::to_string(rank), "--tp-master", master});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  BRIOCHE_CHECK(pid >= 0, "--tensor-parallel: fork for rank ", rank, " failed");
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

// Reaps the workers. A worker that dies while rank 0 still runs would leave
// rank 0 waiting in its next collective forever (NCCL does not notice a
// dead peer on one host): end the whole job with an error instead.
struct WorkerWatchdog {
  std::vector<pid_t> workers;
  std::atomic<bool> stopping{false};
  std::thread thread;

  explicit WorkerWatchdog(std::vector<pid_t> pids) : workers(std::move(pids)) {
    thread = std::thread([this] {
      std::vector<pid_t> live = workers;
      std::chrono::steady_clock::time_point stop_seen{};
      while (!live.empty()) {
        // Once rank 0 has told the workers to stop they exit within seconds;
        // one still there after a minute is stuck (e.g. in NCCL teardown):
        // end it instead of keeping rank 0 from exiting.
        if (stopping && stop_seen == std::chrono::steady_clock::time_point{}) stop_seen = std::chrono::steady_clock::now();
        if (stopping && std::chrono::steady_clock::now() - stop_seen > std::chrono::seconds(60)) {
          for (pid_t pid : live) {
            std::fprintf(stderr, "brioche: tensor-parallel worker (pid %d) did not exit 60 s after the stop; killed\n",
                         int(pid));
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
          }
          break;
        }
        for (size_t i = 0; i < live.size();) {
          int status = 0;
          if (::waitpid(live[i], &status, WNOHANG) != live[i]) {
            ++i;
            continue;
          }
          if (!stopping) {
            std::fprintf(stderr, "brioche: tensor-parallel worker (pid %d) %s %d; stopping\n", int(live[i]),
                         WIFEXITED(status) ? "exited with status" : "was killed by signal",
                         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            std::fflush(nullptr);
            std::_Exit(kExitFailure);
          }
          live.erase(live.begin() + long(i));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  void join() {
    if (thread.joinable()) thread.join();
  }
  ~WorkerWatchdog() {
    if (thread.joinable()) thread.detach();  // process exit ends it
  }
};

}  // namespace

std::shared_ptr<model::Model> load_tensor_parallel(const ModelFlags& flags, const std::string& path,
                                                   model::LoadOptions options) {
  const int n = flags.tensor_parallel;
  if (options.device != Device::CUDA)
    throw UsageError{"--tensor-parallel " + std::to_string(n) + " needs CUDA GPUs (--device cuda)"};
  const int gpus = ops::device_count();
  const bool launcher = flags.tp_rank < 0;
  const int rank = launcher ? 0 : flags.tp_rank;
  if (rank >= n)
    throw UsageError{"--tp-rank " + std::to_string(rank) + " outside --tensor-parallel " + std::to_string(n)};
  if (launcher && n > gpus)
    throw UsageError{"--tensor-parallel " + std::to_string(n) + ": this machine has " + std::to_string(gpus) +
                     " GPU(s); start ranks on other nodes by hand with --tp-rank and --tp-master (docs/cuda.md)"};
  if (!launcher && flags.tp_master.empty()) throw UsageError{"--tp-rank needs --tp-master HOST:PORT of rank 0"};
  const std::string master =
      flags.tp_master.empty() ? "127.0.0.1:" + std::to_string(ops::free_tcp_port()) : flags.tp_master;
  std::vector<pid_t> workers;
  if (launcher)
    for (int r = 1; r < n; ++r) workers.push_back(start_worker(r, master));

  ops::select_device(rank % gpus);  // several nodes: rank r uses local GPU r mod (GPUs per node)
  options.tp_rank = rank;
  options.tp_size = n;
  std::unique_ptr<model::Model> loaded = model::Model::load(path, options);
  std::unique_ptr<model::LlamaModel> shard(dynamic_cast<model::LlamaModel*>(loaded.release()));
  BRIOCHE_CHECK(shard != nullptr, "--tensor-parallel: ", path, " did not load as a Llama-family model");
  std::unique_ptr<ops::Collective> collective =
      ops::connect_nccl({.rank = rank, .size = n, .master = master, .timeout_s = 600});
  if (rank != 0) {
    try {
      model::run_tensor_parallel_worker(*shard, *collective);
    } catch (const Error& e) {
      std::fprintf(stderr, "brioche: tensor-parallel rank %d: %s\n", rank, e.what());
      std::fflush(nullptr);
      std::_Exit(kExitFailure);
    }
    shard.reset();
    collective.reset();
    std::fflush(nullptr);
    std::exit(kExitOk);  // the worker has no command of its own to run
  }
  auto* tp = new model::TensorParallelModel(std::move(shard), std::move(collective));
  auto watchdog = std::make_shared<WorkerWatchdog>(std::move(workers));
  return std::shared_ptr<model::Model>(tp, [watchdog](model::Model* m) {
    watchdog->stopping = true;
    delete m;  // tells the workers to stop
    watchdog->join();
  });
}

}  // namespace brioche::cli
