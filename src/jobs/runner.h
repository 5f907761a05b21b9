// Runs fine-tuning jobs as `brioche train` child processes, one thread
// watching them: it starts queued jobs within --max-concurrent-jobs and the
// memory budget, tails each child's log.jsonl into the store's metrics and
// events, and records how each child ended (docs/jobs-api.md).
//
// A child cannot take the server down: it is another process; its crash is
// an exit status and a stderr tail in the job's error. It gets SIGTERM when
// the server dies (PR_SET_PDEATHSIG), so it stops at a checkpoint.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "jobs/store.h"

namespace brioche::jobs {

struct RunnerOptions {
  std::string data_dir;                    // jobs/<id>/ lie under it
  std::string trainer = "/proc/self/exe";  // the program run as `<trainer> train --config ...`
  int max_concurrent = 1;                  // --max-concurrent-jobs
  int max_queued = 8;                      // --max-queued-jobs
  int64_t memory_budget_bytes = 0;         // --jobs-memory-mb; 0: 80% of the machine's memory
  bool resume_interrupted = false;         // --resume-interrupted-jobs
  // How long shutdown waits for trainers to write their checkpoint. They
  // finish it on their own after the server has gone (the next server waits
  // for them before resuming), so this only keeps the last rows in this run.
  double stop_grace_s = 5;
  int poll_ms = 250;
};

// Serves a finished adapter as model `name` (a PEFT folder at `dir`); throws on failure.
using PublishAdapter = std::function<void(const std::string& name, const std::string& dir)>;

class JobRunner {
 public:
  JobRunner(JobStore& store, RunnerOptions options, PublishAdapter publish);
  ~JobRunner();  // stop()

  // Marks jobs a stopped server left running as interrupted (queued again
  // with resume_interrupted), serves the adapters of succeeded jobs, and
  // starts the watching thread.
  void start();
  // SIGTERM to every trainer, waits up to stop_grace_s for their
  // checkpoints, marks their jobs interrupted.
  void stop();

  // Admission of a new job (already validated): JobsError 429 too_many_jobs
  // when max_queued jobs wait, 400 over_memory_budget when its estimate
  // alone exceeds the budget. Writes the job's directory and config, stores it.
  void submit(JobRecord job, const nlohmann::json& train_config);
  // State changes asked for by a client; JobsError 404 / 409 as documented.
  void cancel(const std::string& id);
  void pause(const std::string& id);
  void resume(const std::string& id);

  // A job a `brioche train --report-to` run elsewhere reports (no child
  // here; its directory is ""): stored as running.
  void add_external(const JobRecord& job);
  // Metric rows (log.jsonl lines) into the store: metrics, events, progress.
  void record_rows(const std::string& id, const std::vector<nlohmann::json>& rows, std::optional<int64_t> log_offset);
  // An external job's end: succeeded, failed (with `message`) or interrupted.
  void finish_external(const std::string& id, const std::string& status, const std::string& message);

  int64_t memory_budget_bytes() const { return options_.memory_budget_bytes; }
  const RunnerOptions& options() const { return options_; }

 private:
  struct Child {
    pid_t pid = 0;
    int64_t estimate = 0;
  };
  void loop();
  void tick();
  void ingest(const std::string& id);  // tails the job's log.jsonl into the store
  void on_exit(const std::string& id, int wait_status);
  void launch(const JobRecord& job);
  void publish(const std::string& id);
  bool stale_trainer_alive(const JobRecord& job) const;
  void event(const std::string& id, const std::string& level, const std::string& message);

  JobStore& store_;
  RunnerOptions options_;
  PublishAdapter publish_;
  std::mutex mutex_;  // children_, and state changes of running jobs
  std::condition_variable wake_;
  std::map<std::string, Child> children_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace brioche::jobs
