#include "cli/train_report.h"

#include <chrono>
#include <cstdio>

#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include "cli/common.h"
#include "core/error.h"
#include "jobs/train_log.h"

namespace brioche::cli {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;

ReportTarget parse_report_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0)
    throw UsageError{"--report-to: expected http://HOST:PORT (a brioche serve), got '" + url + "'"};
  std::string rest = url.substr(scheme.size());
  if (size_t slash = rest.find('/'); slash != std::string::npos) rest.resize(slash);
  ReportTarget t;
  if (size_t colon = rest.rfind(':'); colon != std::string::npos) {
    t.host = rest.substr(0, colon);
    t.port = rest.substr(colon + 1);
  } else {
    t.host = rest;
  }
  if (t.host.empty() || t.port.empty() || t.port.find_first_not_of("0123456789") != std::string::npos)
    throw UsageError{"--report-to: expected http://HOST:PORT, got '" + url + "'"};
  return t;
}

json TrainReporter::post(const std::string& path, const json& body) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.expires_after(std::chrono::seconds(10));
  net::ip::tcp::resolver resolver(ioc);
  stream.connect(resolver.resolve(target_.host, target_.port));
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, target_.host);
  req.set(http::field::content_type, "application/json");
  if (!target_.api_key.empty()) req.set(http::field::authorization, "Bearer " + target_.api_key);
  req.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res);
  beast::error_code ignored;
  stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  json answer = json::parse(res.body(), nullptr, false);
  if (res.result_int() != 200) {
    const std::string message =
        answer.is_object() && answer.contains("error") ? answer["error"].value("message", res.body()) : res.body();
    fail("the server answered ", res.result_int(), " to POST ", path, ": ", message);
  }
  return answer;
}

TrainReporter::TrainReporter(ReportTarget target, const json& job, std::string log_path, std::atomic<bool>* stop_flag)
    : target_(std::move(target)), log_path_(std::move(log_path)), stop_flag_(stop_flag) {
  try {
    job_id_ = post("/v1/fine_tuning/jobs/external", job).value("id", "");
  } catch (const std::exception& e) {
    fail("--report-to ", target_.host, ":", target_.port, ": cannot announce the job: ", e.what());
  }
  thread_ = std::thread([this] { loop(); });
}

TrainReporter::~TrainReporter() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TrainReporter::send_new_rows() {
  jobs::LogChunk chunk = jobs::read_log_lines(log_path_, offset_);
  try {
    const json answer = post("/v1/fine_tuning/jobs/" + job_id_ + "/report", {{"rows", chunk.rows}});
    offset_ = chunk.next_offset;
    warned_ = false;
    if (answer.value("status", "") == "cancelled" && stop_flag_ && !stop_flag_->exchange(true))
      std::fprintf(stderr, "train: the job was cancelled on the server; stopping after this step\n");
  } catch (const std::exception& e) {
    if (!warned_) std::fprintf(stderr, "train: warning: --report-to: %s (training goes on; retrying)\n", e.what());
    warned_ = true;
  }
}

void TrainReporter::loop() {
  std::unique_lock lock(mutex_);
  while (!done_) {
    wake_.wait_for(lock, std::chrono::seconds(1), [&] { return done_; });
    if (done_) break;
    lock.unlock();
    send_new_rows();
    lock.lock();
  }
}

void TrainReporter::finish(const std::string& status, const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  send_new_rows();
  try {
    post("/v1/fine_tuning/jobs/" + job_id_ + "/report", {{"status", status}, {"message", message}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: warning: --report-to: the run's end was not reported: %s\n", e.what());
  }
}

}  // namespace brioche::cli
