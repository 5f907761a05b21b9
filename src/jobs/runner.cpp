#include "jobs/runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "jobs/jobs_error.h"
#include "jobs/train_log.h"

namespace brioche::jobs {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kExitInterrupted = 130;  // `brioche train` stopped by a signal after writing its checkpoint
constexpr size_t kStderrTailBytes = 2000;

int64_t machine_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (in >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    in.ignore(1 << 10, '\n');
  }
  return int64_t(8) << 30;
}

std::string output_dir(const JobRecord& job) { return job.directory + "/output"; }

bool is_terminal(const std::string& s) {
  return s == status::kSucceeded || s == status::kFailed || s == status::kCancelled;
}

std::string describe_exit(int wait_status) {
  if (WIFEXITED(wait_status)) return "the trainer exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status))
    return std::string("the trainer was killed by signal ") + strsignal(WTERMSIG(wait_status));
  return "the trainer ended (wait status " + std::to_string(wait_status) + ")";
}

[[noreturn]] void not_found(const std::string& id) {
  throw JobsError(404, "job_not_found", "fine_tuning_job_id", "fine-tuning job '" + id + "' does not exist");
}

[[noreturn]] void invalid_state(const JobRecord& job, const std::string& action, const std::string& allowed) {
  throw JobsError(409, "invalid_state", "",
                  "cannot " + action + " job " + job.id + ": its status is '" + job.status + "' (" + action +
                      " needs " + allowed + ")");
}

}  // namespace

JobRunner::JobRunner(JobStore& store, RunnerOptions options, PublishAdapter publish)
    : store_(store), options_(std::move(options)), publish_(std::move(publish)) {
  if (options_.memory_budget_bytes <= 0) options_.memory_budget_bytes = machine_memory_bytes() / 10 * 8;
}

JobRunner::~JobRunner() { stop(); }

void JobRunner::event(const std::string& id, const std::string& level, const std::string& message) {
  store_.add_event({.job_id = id, .created_at = now_seconds(), .level = level, .type = "message", .message = message});
}

void JobRunner::start() {
  for (const JobRecord& job : store_.jobs_with_status(status::kRunning)) {
    ingest(job.id);
    store_.transition(job.id, {status::kRunning}, status::kInterrupted);
    if (job.directory.empty())
      event(job.id, "warn", "interrupted: the server restarted; the reporting trainer's next report continues the job");
    else
      event(job.id, "warn",
            "interrupted: the server stopped while this job ran (trainer pid " + std::to_string(job.pid) +
                "); resume it to continue from its last checkpoint");
  }
  if (options_.resume_interrupted) {
    for (const JobRecord& job : store_.jobs_with_status(status::kInterrupted)) {
      if (job.directory.empty()) continue;  // a --report-to job resumes where it runs
      store_.transition(job.id, {status::kInterrupted}, status::kQueued);
      event(job.id, "info", "resumed at server start (--resume-interrupted-jobs); queued");
    }
  }
  for (const JobRecord& job : store_.jobs_with_status(status::kSucceeded)) {
    for (const json& name : job.served_models) {
      const std::string n = name.get<std::string>();
      const std::string suffix = ":ckpt-step-";
      const size_t at = n.rfind(suffix);
      const std::string dir = at == std::string::npos
                                  ? output_dir(job)
                                  : output_dir(job) + "/checkpoints/step_" + n.substr(at + suffix.size());
      try {
        publish_(n, dir);
      } catch (const std::exception& e) {
        event(job.id, "warn", "cannot serve " + n + " at server start: " + e.what());
      }
    }
  }
  thread_ = std::thread([this] { loop(); });
}

void JobRunner::stop() {
  if (stopping_.exchange(true)) return;
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::unique_lock lock(mutex_);
  for (auto& [id, child] : children_) kill(child.pid, SIGTERM);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(options_.stop_grace_s * 1000));
  while (!children_.empty() && std::chrono::steady_clock::now() < deadline) {
    for (auto it = children_.begin(); it != children_.end();) {
      int wait_status = 0;
      if (waitpid(it->second.pid, &wait_status, WNOHANG) == it->second.pid) {
        const std::string id = it->first;
        it = children_.erase(it);
        ingest(id);
        if (store_.transition(id, {status::kRunning}, status::kInterrupted))
          event(id, "warn",
                "interrupted: the server stopped (" + describe_exit(wait_status) +
                    "); resume it to continue from its last checkpoint");
      } else {
        ++it;
      }
    }
    if (!children_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& [id, child] : children_) {  // still writing: the next server waits for it (its pid is stored)
    ingest(id);
    if (store_.transition(id, {status::kRunning}, status::kInterrupted))
      event(id, "warn",
            "interrupted: the server stopped while the trainer (pid " + std::to_string(child.pid) +
                ") was still writing its checkpoint");
  }
}

void JobRunner::loop() {
  while (!stopping_) {
    try {
      tick();
    } catch (const std::exception& e) {  // a database error: say so, keep watching
      std::fprintf(stderr, "brioche serve: jobs runner: %s\n", e.what());
    }
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, std::chrono::milliseconds(options_.poll_ms), [&] { return stopping_.load(); });
  }
}

void JobRunner::tick() {
  std::lock_guard lock(mutex_);
  for (auto it = children_.begin(); it != children_.end();) {
    const std::string id = it->first;
    ingest(id);
    int wait_status = 0;
    if (waitpid(it->second.pid, &wait_status, WNOHANG) == it->second.pid) {
      it = children_.erase(it);
      on_exit(id, wait_status);
    } else {
      ++it;
    }
  }
  if (stopping_) return;
  int64_t in_use = 0;
  for (const auto& [id, child] : children_) in_use += child.estimate;
  for (const JobRecord& job : store_.jobs_with_status(status::kQueued)) {
    if (int(children_.size()) >= options_.max_concurrent) break;
    if (in_use + job.estimated_memory_bytes > options_.memory_budget_bytes) break;  // first come, first served
    if (children_.count(job.id) || stale_trainer_alive(job))
      continue;  // its last trainer is still writing its checkpoint
    launch(job);
    in_use += job.estimated_memory_bytes;
  }
}

bool JobRunner::stale_trainer_alive(const JobRecord& job) const {
  if (job.pid <= 0 || kill(pid_t(job.pid), 0) != 0) return false;
  std::ifstream in("/proc/" + std::to_string(job.pid) + "/cmdline", std::ios::binary);
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cmdline.find(job.directory + "/config.json") != std::string::npos;
}

void JobRunner::ingest(const std::string& id) {
  std::optional<JobRecord> job = store_.job(id);
  if (!job || job->directory.empty()) return;
  LogChunk chunk = read_log_lines(output_dir(*job) + "/log.jsonl", job->log_offset);
  if (chunk.next_offset == job->log_offset && chunk.rows.empty()) return;
  record_rows(id, chunk.rows, chunk.next_offset);
}

void JobRunner::record_rows(const std::string& id, const std::vector<json>& rows, std::optional<int64_t> log_offset) {
  std::optional<JobRecord> job = store_.job(id);
  if (!job) return;
  int64_t step = job->step, tokens = job->trained_tokens;
  for (const json& row : rows) {
    std::optional<MetricRow> m = metric_row(row);
    if (!m) continue;
    store_.put_metric(id, *m);
    store_.add_event(metric_event(id, *m, job->total_steps));
    if (m->kind == "step") {
      step = m->step;
      if (m->row.contains("tokens") && m->row["tokens"].is_number_integer()) tokens = m->row["tokens"].get<int64_t>();
    }
  }
  store_.set_progress(id, step, tokens, log_offset.value_or(job->log_offset));
}

void JobRunner::add_external(const JobRecord& job) {
  std::lock_guard lock(mutex_);
  store_.add_job(job);
  event(job.id, "info",
        "reported by brioche train --report-to: " + job.method_type + " on " + job.model + ", " +
            std::to_string(job.total_steps) + " steps");
}

void JobRunner::finish_external(const std::string& id, const std::string& to, const std::string& message) {
  std::lock_guard lock(mutex_);
  if (!store_.transition(id, {status::kRunning, status::kInterrupted}, to)) return;  // cancelled here, or already final
  if (to != status::kInterrupted) store_.set_finished(id, now_seconds());
  if (to == status::kFailed)
    store_.set_error(id, {{"code", "trainer_failed"}, {"message", message}, {"param", nullptr}});
  event(id, to == status::kFailed ? "error" : "info",
        "the reporting trainer ended: " + to + (message.empty() ? "" : ": " + message));
}

void JobRunner::on_exit(const std::string& id, int wait_status) {
  std::optional<JobRecord> job = store_.job(id);
  if (!job) return;
  const bool ok = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
  const bool stopped = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kExitInterrupted;
  if (job->status == status::kQueued) {  // resumed before the paused trainer had exited
    event(id, "info", "the previous trainer stopped (" + describe_exit(wait_status) + "); starting again");
    return;
  }
  if (job->status == status::kCancelled) {
    event(id, "info", "the trainer stopped (" + describe_exit(wait_status) + ")");
    return;
  }
  if (job->status == status::kPaused && !ok) {
    const std::string ck = newest_checkpoint(output_dir(*job));
    event(id, "info",
          "paused at step " + std::to_string(job->step) +
              (ck.empty() ? " (no checkpoint: a resume starts over)"
                          : "; checkpoint " + fs::path(ck).filename().string()));
    return;
  }
  if (ok) {  // finished (also when a pause came too late to stop it)
    event(id, "info", "training finished at step " + std::to_string(job->step));
    publish(id);  // before the status: a client that sees succeeded finds fine_tuned_model served
    store_.set_finished(id, now_seconds());
    store_.transition(id, {status::kRunning, status::kPaused}, status::kSucceeded);
    return;
  }
  if (stopped) {  // SIGTERM from elsewhere (the server's own shutdown is handled in stop())
    store_.transition(id, {status::kRunning}, status::kInterrupted);
    event(id, "warn",
          "interrupted: the trainer was stopped from outside the server at step " + std::to_string(job->step) +
              "; resume it to continue");
    return;
  }
  const std::string tail = file_tail(job->directory + "/stderr.log", kStderrTailBytes);
  store_.transition(id, {status::kRunning}, status::kFailed);
  store_.set_finished(id, now_seconds());
  store_.set_error(
      id, {{"code", "trainer_failed"}, {"message", describe_exit(wait_status) + ": " + tail}, {"param", nullptr}});
  store_.add_event({.job_id = id,
                    .created_at = now_seconds(),
                    .level = "error",
                    .type = "message",
                    .message = "failed: " + describe_exit(wait_status),
                    .data = {{"stderr_tail", tail}}});
}

void JobRunner::publish(const std::string& id) {
  std::optional<JobRecord> job = store_.job(id);
  if (!job) return;
  const std::string name = "ft:" + job->model + ":" + job->suffix + ":" + job->id;
  json served = json::array();
  std::optional<int64_t> best_step;
  std::vector<std::pair<std::string, std::string>> adapters = {{name, output_dir(*job)}};
  std::ifstream in(output_dir(*job) + "/metrics.json");
  const json metrics = json::parse(in, nullptr, false);
  if (metrics.is_object() && metrics.contains("best_margin_step") && metrics["best_margin_step"].is_number_integer()) {
    best_step = metrics["best_margin_step"].get<int64_t>();
    const std::string dir = output_dir(*job) + "/checkpoints/step_" + std::to_string(*best_step);
    if (*best_step > 0 && fs::is_directory(dir))
      adapters.emplace_back(name + ":ckpt-step-" + std::to_string(*best_step), dir);
    else if (*best_step > 0)
      event(id, "warn", "the best-margin step " + std::to_string(*best_step) + " has no checkpoint to serve");
  }
  for (const auto& [n, dir] : adapters) {
    try {
      publish_(n, dir);
      served.push_back(n);
      event(id, "info", "serving " + n);
    } catch (const std::exception& e) {
      event(id, "error", "cannot serve " + n + ": " + e.what());
    }
  }
  store_.set_result(id, name, served, best_step);
}

void JobRunner::launch(const JobRecord& job) {
  ingest(job.id);  // whatever a stopped server's trainer wrote last
  const std::string out = output_dir(job);
  const std::string checkpoint = newest_checkpoint(out);
  std::vector<std::string> args = {options_.trainer, "train", "--config", job.directory + "/config.json"};
  std::error_code ec;
  if (!checkpoint.empty())
    args.insert(args.end(), {"--resume", checkpoint});
  else if (fs::exists(out, ec))
    args.push_back("--overwrite");
  const std::string stderr_path = job.directory + "/stderr.log";
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // The child: only async-signal-safe calls until exec.
    prctl(PR_SET_PDEATHSIG, SIGHUP);  // `brioche train` stops after its step at a checkpoint on SIGHUP
    if (getppid() != parent) _exit(kExitInterrupted);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // the server blocks SIGTERM in its threads; the trainer must see it
    signal(SIGPIPE, SIG_DFL);
    const int log = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (log >= 0) dup2(log, STDOUT_FILENO), dup2(log, STDERR_FILENO);
    if (null >= 0) dup2(null, STDIN_FILENO);
    syscall(SYS_close_range, 3u, ~0u, 0u);  // the server's sockets stay the server's
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (pid < 0) {
    event(job.id, "error", std::string("cannot start the trainer: ") + std::strerror(errno));
    store_.transition(job.id, {status::kQueued}, status::kFailed);
    store_.set_error(
        job.id,
        {{"code", "trainer_failed"}, {"message", std::string("fork: ") + std::strerror(errno)}, {"param", nullptr}});
    return;
  }
  children_[job.id] = Child{.pid = pid, .estimate = job.estimated_memory_bytes};
  store_.set_pid(job.id, pid);
  store_.transition(job.id, {status::kQueued}, status::kRunning);
  event(job.id, "info",
        "started (trainer pid " + std::to_string(pid) + ")" +
            (checkpoint.empty() ? "" : ", resuming from " + fs::path(checkpoint).filename().string()));
}

void JobRunner::submit(JobRecord job, const json& train_config) {
  std::lock_guard lock(mutex_);
  if (store_.count_with_status(status::kQueued) >= options_.max_queued)
    throw JobsError(429, "too_many_jobs", "",
                    "too many queued jobs: " + std::to_string(options_.max_queued) +
                        " wait already (--max-queued-jobs); retry when one has started");
  if (job.estimated_memory_bytes > options_.memory_budget_bytes)
    throw JobsError(400, "over_memory_budget", "method",
                    "the job's memory estimate, " + std::to_string(job.estimated_memory_bytes >> 20) +
                        " MiB, exceeds the jobs' memory budget of " +
                        std::to_string(options_.memory_budget_bytes >> 20) +
                        " MiB (--jobs-memory-mb); lower max_length or batch_size, or use segment_size/head_chunk_size");
  job.directory = options_.data_dir + "/jobs/" + job.id;
  fs::create_directories(job.directory + "/data");
  auto copy = [&](const std::string& file_id, const char* name) {
    std::optional<FileRecord> f = store_.file(file_id);
    if (!f) throw JobsError(400, "file_not_found", name, "file '" + file_id + "' does not exist (deleted?)");
    fs::copy_file(f->path, job.directory + "/data/" + name + ".jsonl", fs::copy_options::overwrite_existing);
  };
  copy(job.training_file, "train");
  if (job.validation_file) copy(*job.validation_file, "valid");
  json config = train_config;
  config["data"] = job.directory + "/data";
  config["output"] = job.directory + "/output";
  config["save_checkpoints"] = true;  // a checkpoint at every evaluation: the best-margin step can be served
  json file_config = config;
  file_config.erase("openai_hyperparameters");  // the API's summary, not a `brioche train` option
  std::ofstream(job.directory + "/config.json") << file_config.dump(2) << "\n";
  job.train_config = config;
  store_.add_job(job);
  event(job.id, "info",
        "created fine-tuning job: " + job.method_type + " on " + job.model + ", " + std::to_string(job.total_steps) +
            " steps; queued");
  wake_.notify_all();
}

void JobRunner::cancel(const std::string& id) {
  std::lock_guard lock(mutex_);
  std::optional<JobRecord> job = store_.job(id);
  if (!job) not_found(id);
  if (is_terminal(job->status)) invalid_state(*job, "cancel", "a job that has not finished");
  if (!store_.transition(id, {job->status}, status::kCancelled))
    invalid_state(*store_.job(id), "cancel", "a job that has not finished");
  store_.set_finished(id, now_seconds());
  auto child = children_.find(id);
  if (child != children_.end()) kill(child->second.pid, SIGTERM);
  event(id, "info", child != children_.end() ? "cancelled; the trainer stops after its current step" : "cancelled");
}

void JobRunner::pause(const std::string& id) {
  std::lock_guard lock(mutex_);
  std::optional<JobRecord> job = store_.job(id);
  if (!job) not_found(id);
  auto child = children_.find(id);
  if (job->status != status::kRunning || child == children_.end()) invalid_state(*job, "pause", "status 'running'");
  store_.transition(id, {status::kRunning}, status::kPaused);
  kill(child->second.pid, SIGTERM);
  event(id, "info", "pause requested; the trainer writes a checkpoint after its current step");
}

void JobRunner::resume(const std::string& id) {
  std::lock_guard lock(mutex_);
  std::optional<JobRecord> job = store_.job(id);
  if (!job) not_found(id);
  if (job->status != status::kPaused && job->status != status::kInterrupted)
    invalid_state(*job, "resume", "status 'paused' or 'interrupted'");
  if (job->directory.empty())
    throw JobsError(409, "invalid_state", "",
                    "job " + id +
                        " was reported by a `brioche train --report-to` run: "
                        "resume it there (brioche train --resume OUTPUT/checkpoints/step_N --report-to ...)");
  if (store_.count_with_status(status::kQueued) >= options_.max_queued)
    throw JobsError(
        429, "too_many_jobs", "",
        "too many queued jobs: " + std::to_string(options_.max_queued) + " wait already (--max-queued-jobs)");
  store_.transition(id, {status::kPaused, status::kInterrupted}, status::kQueued);
  const std::string ck = newest_checkpoint(output_dir(*job));
  if (children_.count(id) || stale_trainer_alive(*job))
    event(id, "info", "resume requested; queued to start once the stopping trainer has written its checkpoint");
  else
    event(id, "info",
          "resume requested; queued to continue from " +
              (ck.empty() ? std::string("the start (no checkpoint)") : fs::path(ck).filename().string()));
  wake_.notify_all();
}

}  // namespace brioche::jobs
