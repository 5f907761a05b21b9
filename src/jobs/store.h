// The durable state of files and fine-tuning jobs: one SQLite file
// (DATA/jobs.sqlite3) with four tables, files, jobs, events and metrics.
//
// Every method takes the store's lock, so request threads and the runner
// share one connection; a job's fields change by targeted updates (status,
// progress, result), never by writing a whole record read earlier, so a
// cancel from a request and the runner's progress cannot undo each other.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jobs/sqlite.h"

namespace brioche::jobs {

struct FileRecord {
  std::string id;        // file-<16 hex>
  std::string filename;  // display name only
  int64_t bytes = 0;
  int64_t created_at = 0;  // unix seconds
  std::string purpose;
  std::string kind;  // sft | preference
  int64_t rows = 0;
  std::string path;  // where the content lies (DATA/files/<id>.jsonl)
};

// Job statuses: OpenAI's and ours (paused, interrupted).
namespace status {
inline constexpr const char* kQueued = "queued";
inline constexpr const char* kRunning = "running";
inline constexpr const char* kSucceeded = "succeeded";
inline constexpr const char* kFailed = "failed";
inline constexpr const char* kCancelled = "cancelled";
inline constexpr const char* kPaused = "paused";
inline constexpr const char* kInterrupted = "interrupted";
}  // namespace status

struct JobRecord {
  std::string id;  // ftjob-<16 hex>
  int64_t created_at = 0;
  std::optional<int64_t> finished_at;
  std::string status = status::kQueued;
  std::string model;
  std::string training_file;
  std::optional<std::string> validation_file;
  std::string suffix;
  int64_t seed = 0;
  nlohmann::json method;        // {"type": ..., <type>: {"hyperparameters": {...as given}}}
  nlohmann::json train_config;  // the resolved `brioche train` options (config.json of the child)
  std::string method_type;      // supervised | dpo | orpo | simpo | ipo
  std::optional<std::string> fine_tuned_model;
  nlohmann::json served_models = nlohmann::json::array();
  nlohmann::json error;  // null or {"code", "message", "param"}
  int64_t step = 0;
  int64_t total_steps = 0;
  int64_t trained_tokens = 0;
  int64_t estimated_memory_bytes = 0;
  std::optional<int64_t> best_margin_step;
  int64_t pid = 0;         // the trainer's process id while one runs (or may still run)
  int64_t log_offset = 0;  // bytes of OUTPUT/log.jsonl already read into metrics/events
  std::string directory;   // DATA/jobs/<id>
};

struct EventRecord {
  int64_t seq = 0;  // global, increasing: the event id is "ftevent-<seq>"
  std::string job_id;
  int64_t created_at = 0;
  std::string level;  // info | warn | error
  std::string type;   // message | metrics
  std::string message;
  nlohmann::json data;  // null or an object
};

struct MetricRow {
  std::string kind;  // step | eval
  int64_t step = 0;
  nlohmann::json row;
};

template <typename T>
struct Page {
  std::vector<T> items;
  bool has_more = false;
};

class JobStore {
 public:
  // Opens or creates the database at `path` and its tables.
  explicit JobStore(const std::string& path);

  void add_file(const FileRecord& file);
  std::optional<FileRecord> file(const std::string& id);
  // Newest first unless ascending; `after` is the id the previous page ended with.
  Page<FileRecord> files(const std::string& purpose, const std::string& after, int limit, bool ascending);
  bool delete_file(const std::string& id);

  void add_job(const JobRecord& job);
  std::optional<JobRecord> job(const std::string& id);
  Page<JobRecord> jobs(const std::string& after, int limit);  // newest first
  std::vector<JobRecord> jobs_with_status(const std::string& status);
  int64_t count_with_status(const std::string& status);

  // Sets the status when the current one is among `from`; returns whether it did.
  bool transition(const std::string& id, const std::vector<std::string>& from, const std::string& to);
  void set_finished(const std::string& id, int64_t finished_at);
  void set_pid(const std::string& id, int64_t pid);
  void set_progress(const std::string& id, int64_t step, int64_t trained_tokens, int64_t log_offset);
  void set_total_steps(const std::string& id, int64_t total_steps);
  void set_error(const std::string& id, const nlohmann::json& error);
  void set_result(const std::string& id, const std::optional<std::string>& fine_tuned_model,
                  const nlohmann::json& served_models, std::optional<int64_t> best_margin_step);

  // Returns the new event's seq.
  int64_t add_event(const EventRecord& event);
  // Newest first, older than event `before_seq` (0: from the newest).
  Page<EventRecord> events(const std::string& job_id, int64_t before_seq, int limit);
  // Oldest first, newer than `after_seq`.
  std::vector<EventRecord> events_after(const std::string& job_id, int64_t after_seq, int limit);

  // One row per (job, kind, step): a step trained again replaces its row.
  void put_metric(const std::string& job_id, const MetricRow& row);
  std::vector<MetricRow> metrics(const std::string& job_id, int64_t after_step);
  int64_t metric_count(const std::string& job_id);

 private:
  JobRecord read_job(Statement& st);
  std::mutex mutex_;
  Database db_;
};

// Unix seconds now.
int64_t now_seconds();
// "<prefix>-" + 16 random hex digits.
std::string random_id(const std::string& prefix);

}  // namespace brioche::jobs
