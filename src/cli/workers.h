// Multi-process jobs on one machine (tensor parallelism, data-parallel
// training): rank 0 re-executes this program once per other rank with the
// same arguments plus hidden flags naming the rank and rank 0's rendezvous
// address, then watches the workers.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace brioche::cli {

struct WorkerFlags {
  std::string rank_flag;    // e.g. "--tp-rank"
  std::string master_flag;  // e.g. "--tp-master"
};

// Starts rank `rank`: this program with its own arguments plus
// `rank_flag R master_flag master`. The worker dies with us
// (PR_SET_PDEATHSIG), reads /dev/null and writes its stdout to stderr.
pid_t start_worker(const WorkerFlags& flags, int rank, const std::string& master);

// Reaps the workers. A worker that dies while rank 0 still runs would leave
// rank 0 waiting in its next collective forever (NCCL does not notice a
// dead peer on one host): the whole job ends with an error instead. After
// `stopping` is set (rank 0 told them to stop), a worker still alive a
// minute later is stuck (e.g. in NCCL teardown) and is killed.
class WorkerWatchdog {
 public:
  WorkerWatchdog(std::vector<pid_t> pids, std::string what);
  ~WorkerWatchdog();
  WorkerWatchdog(const WorkerWatchdog&) = delete;
  WorkerWatchdog& operator=(const WorkerWatchdog&) = delete;

  // From now on exits are expected; join() returns when all workers are gone.
  void stop_expected() { stopping_ = true; }
  void join();
  // True when every worker exited with status 0 (valid after join()).
  bool all_ok() const { return all_ok_; }

 private:
  std::vector<pid_t> workers_;
  std::string what_;  // "tensor-parallel worker", for messages
  std::atomic<bool> stopping_{false};
  std::atomic<bool> all_ok_{true};
  std::thread thread_;
};

}  // namespace brioche::cli
