#include "server/jobs_api.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>

#include "core/error.h"
#include "jobs/jobs_error.h"
#include "server/api_error.h"
#include "server/openai_response.h"

namespace brioche::server {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Multipart framing and the purpose field around the file itself.
constexpr size_t kUploadOverheadBytes = 64 << 10;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size() + 0 && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out.push_back(char(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

RouteReply json_reply(int status, const json& body) {
  return RouteReply{.status = status, .content_type = "application/json", .body = dump_json(body)};
}

std::map<std::string, std::string> parse_query(std::string_view query) {
  std::map<std::string, std::string> out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    out[percent_decode(pair.substr(0, eq))] = eq == std::string_view::npos ? "" : percent_decode(pair.substr(eq + 1));
  }
  return out;
}

int64_t query_int(const RouteRequest& r, const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  auto it = r.query.find(key);
  if (it == r.query.end() || it->second.empty()) return fallback;
  int64_t value = 0;
  size_t used = 0;
  try {
    value = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != it->second.size() || value < min || value > max)
    throw invalid_param(key, "query parameter '" + key + "': expected an integer from " + std::to_string(min) + " to " +
                                 std::to_string(max) + ", got '" + it->second + "'");
  return value;
}

std::string query_string(const RouteRequest& r, const std::string& key, const std::string& fallback) {
  auto it = r.query.find(key);
  return it == r.query.end() ? fallback : it->second;
}

std::string filename_problem(std::string_view name) {
  if (name.empty()) return "the file name is empty";
  if (name.size() > 255) return "the file name is longer than 255 bytes";
  if (name == "." || name == "..") return "the file name '" + std::string(name) + "' is a directory reference";
  for (unsigned char c : name) {
    if (c == '/' || c == '\\')
      return "the file name '" + std::string(name) +
             "' holds a path; give a plain name (the server stores files by id)";
    if (c < 0x20 || c == 0x7f) return "the file name holds control characters";
  }
  return "";
}

JobsApi::JobsApi(JobsOptions options, JobsModel model, AdapterRegistry* adapters)
    : options_(std::move(options)), model_(std::move(model)), adapters_(adapters) {
  fs::create_directories(fs::path(options_.data_dir) / "files");
  fs::create_directories(fs::path(options_.data_dir) / "jobs");
  // One server per data directory: a second one would mark the first's
  // running jobs interrupted and start its queued jobs twice.
  lock_fd_ = ::open((options_.data_dir + "/server.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
    fail("--data-dir ", options_.data_dir, " is in use by another brioche serve (", options_.data_dir,
         "/server.lock is locked); give this server its own --data-dir");
  store_ = std::make_unique<jobs::JobStore>(options_.data_dir + "/jobs.sqlite3");
  jobs::RunnerOptions runner{.data_dir = options_.data_dir,
                             .trainer = options_.trainer,
                             .max_concurrent = options_.max_concurrent_jobs,
                             .max_queued = options_.max_queued_jobs,
                             .memory_budget_bytes = options_.memory_budget_mb << 20,
                             .resume_interrupted = options_.resume_interrupted};
  runner_ = std::make_unique<jobs::JobRunner>(*store_, runner, [this](const std::string& name, const std::string& dir) {
    if (!adapters_) fail("no adapter registry");
    adapters_->publish(name, dir);
  });
}

JobsApi::~JobsApi() {
  stop();
  runner_.reset();
  store_.reset();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void JobsApi::start() { runner_->start(); }

void JobsApi::stop() {
  if (runner_) runner_->stop();
}

bool JobsApi::handles(std::string_view path) {
  auto under = [&](std::string_view root) {
    return path == root ||
           (path.size() > root.size() && path.substr(0, root.size()) == root && path[root.size()] == '/');
  };
  return under("/v1/files") || under("/v1/fine_tuning/jobs");
}

size_t JobsApi::body_limit(std::string_view path, size_t default_limit) const {
  if (path == "/v1/files") return std::max(default_limit, options_.max_file_bytes + kUploadOverheadBytes);
  return default_limit;
}

RouteReply JobsApi::handle(const RouteRequest& request) {
  try {
    if (request.path.rfind("/v1/files", 0) == 0) return files_route(request);
    return jobs_route(request);
  } catch (const jobs::JobsError& e) {
    throw ApiError{.status = e.status,
                   .message = e.what(),
                   .type = e.status == 429 ? "rate_limit_error" : "invalid_request_error",
                   .param = e.param,
                   .code = e.code};
  }
}

jobs::FileRecord JobsApi::require_file(const std::string& id, const std::string& param) {
  std::optional<jobs::FileRecord> f = store_->file(id);
  if (!f)
    throw ApiError{.status = param.empty() ? 404 : 400,
                   .message = "file '" + id + "' does not exist",
                   .type = "invalid_request_error",
                   .param = param,
                   .code = "file_not_found"};
  return *f;
}

jobs::JobRecord JobsApi::require_job(const std::string& id) {
  std::optional<jobs::JobRecord> j = store_->job(id);
  if (!j)
    throw ApiError{.status = 404,
                   .message = "fine-tuning job '" + id + "' does not exist",
                   .type = "invalid_request_error",
                   .param = "fine_tuning_job_id",
                   .code = "job_not_found"};
  return *j;
}

}  // namespace brioche::server
