// `brioche train --report-to http://HOST:PORT`: the run appears in that
// server's fine-tuning job list (docs/jobs-api.md, "Reported jobs") with its
// per-step metrics and events, while it trains here.
//
// A thread tails OUTPUT/log.jsonl (what the trainer writes anyway) and posts
// the new rows every second; the server's answer says whether the job was
// cancelled there, which stops the run after its step, as SIGTERM would.
// The server being away never fails the training: a warning, then retries.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace brioche::cli {

struct ReportTarget {
  std::string host;
  std::string port = "80";
  std::string api_key;  // --report-key or $BRIOCHE_API_KEY; "" sends none
};

// "http://host:port[/]" -> target; throws UsageError on anything else (https is not spoken).
ReportTarget parse_report_url(const std::string& url);

class TrainReporter {
 public:
  // Announces the job (POST /v1/fine_tuning/jobs/external); throws brioche::Error when the server refuses or is away.
  TrainReporter(ReportTarget target, const nlohmann::json& job, std::string log_path, std::atomic<bool>* stop_flag);
  ~TrainReporter();
  // Posts what is left of the log and the run's end: succeeded, failed or interrupted.
  void finish(const std::string& status, const std::string& message);
  const std::string& job_id() const { return job_id_; }

 private:
  nlohmann::json post(const std::string& path, const nlohmann::json& body);
  void send_new_rows();
  void loop();

  ReportTarget target_;
  std::string log_path_;
  std::atomic<bool>* stop_flag_;
  std::string job_id_;
  int64_t offset_ = 0;
  bool warned_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace brioche::cli
