// The files and fine-tuning jobs API (docs/jobs-api.md): POST/GET/DELETE
// /v1/files..., /v1/fine_tuning/jobs...; HTTP-free so tests drive it
// directly. http_server.cpp hands it the requests whose path it handles()
// (off the I/O threads: uploads are validated through the tokenizer) and
// writes the reply, or streams it when the reply polls (SSE events).
//
// State lives in jobs/ (SQLite store, runner of `brioche train` children);
// a finished job's adapter is served through the AdapterRegistry.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "jobs/dataset_check.h"
#include "jobs/job_spec.h"
#include "jobs/runner.h"
#include "jobs/store.h"
#include "server/adapter_registry.h"

namespace brioche::server {

struct JobsOptions {
  std::string data_dir;                    // --data-dir; "" = no jobs API
  size_t max_file_bytes = 64u << 20;       // --max-file-bytes
  int max_concurrent_jobs = 1;             // --max-concurrent-jobs
  int max_queued_jobs = 8;                 // --max-queued-jobs
  int64_t memory_budget_mb = 0;            // --jobs-memory-mb; 0: 80% of the machine's memory
  bool resume_interrupted = false;         // --resume-interrupted-jobs
  std::string trainer = "/proc/self/exe";  // the program started as `<trainer> train ...`
  std::string default_device = "cpu";      // the trainer's device unless a job sets `device`
};

// What the jobs API needs of the served model.
struct JobsModel {
  std::string id;    // as /v1/models lists it
  std::string path;  // the model file (or safetensors directory) the trainer loads
  jobs::ModelText text;
  jobs::ModelShape shape;
};

struct RouteRequest {
  std::string method;                        // GET, POST, DELETE
  std::string path;                          // without the query
  std::map<std::string, std::string> query;  // decoded
  std::string content_type;
  std::string_view body;
};

struct RouteReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Server-sent events: when set, the reply is a text/event-stream whose
  // chunks come from calling poll() every kPollMs until it sets done.
  std::function<std::string(bool& done)> poll;
  static constexpr int kPollMs = 250;
};

class JobsApi {
 public:
  JobsApi(JobsOptions options, JobsModel model, AdapterRegistry* adapters);
  ~JobsApi();
  // Restarts interrupted bookkeeping and the runner thread.
  void start();
  // Stops the trainers at a checkpoint (their jobs become interrupted).
  void stop();

  static bool handles(std::string_view path);
  // The body limit of a request to `path` (uploads may exceed the server's --max-body).
  size_t body_limit(std::string_view path, size_t default_limit) const;
  const JobsOptions& options() const { return options_; }

  // Throws ApiError for anything the client got wrong.
  RouteReply handle(const RouteRequest& request);

 private:
  RouteReply files_route(const RouteRequest& request);
  RouteReply upload_file(const RouteRequest& request);
  RouteReply preview_file(const jobs::FileRecord& file, const RouteRequest& request);
  RouteReply jobs_route(const RouteRequest& request);
  RouteReply create_job(const RouteRequest& request);
  RouteReply create_external_job(const RouteRequest& request);
  RouteReply report_external_job(const jobs::JobRecord& job, const RouteRequest& request);
  RouteReply job_events(const jobs::JobRecord& job, const RouteRequest& request);
  RouteReply job_metrics(const jobs::JobRecord& job, const RouteRequest& request);
  RouteReply job_checkpoints(const jobs::JobRecord& job, const RouteRequest& request);
  jobs::FileRecord require_file(const std::string& id, const std::string& param);
  jobs::JobRecord require_job(const std::string& id);
  nlohmann::json job_json(const jobs::JobRecord& job);

  JobsOptions options_;
  JobsModel model_;
  AdapterRegistry* adapters_;
  std::unique_ptr<jobs::JobStore> store_;
  std::unique_ptr<jobs::JobRunner> runner_;
  int lock_fd_ = -1;  // DATA/server.lock, held while this server runs
};

// JSON helpers shared by the route files.
RouteReply json_reply(int status, const nlohmann::json& body);
// Reads a query integer in [min, max] (default when absent); ApiError 400 naming it otherwise.
int64_t query_int(const RouteRequest& request, const std::string& key, int64_t fallback, int64_t min, int64_t max);
std::string query_string(const RouteRequest& request, const std::string& key, const std::string& fallback = "");
// Percent-decoded `a=b&c=d` (a '+' is a space, as forms send it).
std::map<std::string, std::string> parse_query(std::string_view query);
// Rejects what is not a plain file name: empty, over 255 bytes, '/', '\\',
// "." or "..", control characters. Returns why, or "" when it is fine.
std::string filename_problem(std::string_view filename);

}  // namespace brioche::server
