// /v1/fine_tuning/jobs: create, list, retrieve, cancel, pause, resume,
// events (paged, or SSE), metrics (ours) and checkpoints.
#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "core/json_limits.h"
#include "jobs/jobs_error.h"
#include "jobs/train_log.h"
#include "server/api_error.h"
#include "server/jobs_api.h"
#include "server/openai_response.h"

namespace brioche::server {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kMaxSuffixBytes = 64;

json event_json(const jobs::EventRecord& e) {
  return {{"object", "fine_tuning.job.event"},
          {"id", "ftevent-" + std::to_string(e.seq)},
          {"created_at", e.created_at},
          {"level", e.level},
          {"type", e.type},
          {"message", e.message},
          {"data", e.data}};
}

// "ftevent-42" -> 42; ApiError 400 otherwise.
int64_t event_seq(const std::string& id) {
  const std::string prefix = "ftevent-";
  if (id.rfind(prefix, 0) != 0 || id.size() == prefix.size() || id.size() > prefix.size() + 18 ||
      id.find_first_not_of("0123456789", prefix.size()) != std::string::npos)
    throw invalid_param("after", "after: expected an event id like 'ftevent-42', got '" + id + "'");
  return std::stoll(id.substr(prefix.size()));
}

bool active(const std::string& s) { return s == jobs::status::kQueued || s == jobs::status::kRunning; }

ApiError method_not_allowed(const RouteRequest& r, const std::string& allowed) {
  return status_error(405, "use " + allowed + " for " + r.path + " (got " + r.method + ")");
}

std::string string_field(const json& body, const char* key, bool required) {
  if (!body.contains(key) || body[key].is_null()) {
    if (required) throw invalid_param(key, std::string("missing '") + key + "'");
    return "";
  }
  if (!body[key].is_string())
    throw invalid_param(key, std::string(key) + ": expected a string, found " + body[key].type_name());
  return body[key].get<std::string>();
}

}  // namespace

json JobsApi::job_json(const jobs::JobRecord& j) {
  return {{"object", "fine_tuning.job"},
          {"id", j.id},
          {"model", j.model},
          {"created_at", j.created_at},
          {"finished_at", j.finished_at ? json(*j.finished_at) : json(nullptr)},
          {"status", j.status},
          {"fine_tuned_model", j.fine_tuned_model ? json(*j.fine_tuned_model) : json(nullptr)},
          {"training_file", j.training_file},
          {"validation_file", j.validation_file ? json(*j.validation_file) : json(nullptr)},
          {"hyperparameters", j.train_config.value("openai_hyperparameters", json::object())},
          {"method", j.method},
          {"seed", j.seed},
          {"suffix", j.suffix.empty() ? json(nullptr) : json(j.suffix)},
          {"organization_id", "brioche"},
          {"result_files", json::array()},
          {"trained_tokens", j.trained_tokens},
          {"estimated_finish", nullptr},
          {"integrations", json::array()},
          {"metadata", nullptr},
          {"error", j.error},
          {"step", j.step},
          {"total_steps", j.total_steps},
          {"estimated_memory_bytes", j.estimated_memory_bytes},
          {"served_models", j.served_models},
          {"best_margin_step", j.best_margin_step ? json(*j.best_margin_step) : json(nullptr)},
          {"resumable", j.status == jobs::status::kPaused || j.status == jobs::status::kInterrupted}};
}

RouteReply JobsApi::jobs_route(const RouteRequest& r) {
  const std::string root = "/v1/fine_tuning/jobs";
  if (r.path == root) {
    if (r.method == "POST") return create_job(r);
    if (r.method != "GET") throw method_not_allowed(r, "GET or POST");
    const int limit = int(query_int(r, "limit", 20, 1, 100));
    jobs::Page<jobs::JobRecord> page = store_->jobs(query_string(r, "after"), limit);
    json data = json::array();
    for (const jobs::JobRecord& j : page.items) data.push_back(job_json(j));
    return json_reply(200, {{"object", "list"}, {"data", data}, {"has_more", page.has_more}});
  }
  std::string rest = r.path.substr(root.size() + 1);
  std::string action;
  if (size_t slash = rest.find('/'); slash != std::string::npos) action = rest.substr(slash + 1), rest.resize(slash);
  if (rest == "external" && action.empty()) {
    if (r.method != "POST") throw method_not_allowed(r, "POST");
    return create_external_job(r);
  }
  jobs::JobRecord job = require_job(rest);
  if (action == "report") {
    if (r.method != "POST") throw method_not_allowed(r, "POST");
    return report_external_job(job, r);
  }
  if (action.empty()) {
    if (r.method != "GET") throw method_not_allowed(r, "GET");
    return json_reply(200, job_json(job));
  }
  if (action == "cancel" || action == "pause" || action == "resume") {
    if (r.method != "POST") throw method_not_allowed(r, "POST");
    if (action == "cancel")
      runner_->cancel(job.id);
    else if (action == "pause")
      runner_->pause(job.id);
    else
      runner_->resume(job.id);
    return json_reply(200, job_json(require_job(job.id)));
  }
  if (r.method != "GET") throw method_not_allowed(r, "GET");
  if (action == "events") return job_events(job, r);
  if (action == "metrics") return job_metrics(job, r);
  if (action == "checkpoints") return job_checkpoints(job, r);
  throw ApiError{.status = 404,
                 .message = "no route for " + r.method + " " + r.path,
                 .type = "invalid_request_error",
                 .param = "",
                 .code = "not_found"};
}

RouteReply JobsApi::create_job(const RouteRequest& r) {
  json body;
  try {
    body = parse_json_bounded(r.body, "the request body");
  } catch (const Error& e) {
    throw status_error(400, e.what());
  }
  if (!body.is_object())
    throw status_error(400, std::string("the request body must be a JSON object, got ") + body.type_name());
  const std::string model = string_field(body, "model", true);
  if (model != model_.id)
    throw ApiError{.status = 400,
                   .message = "model '" + model + "' does not exist here: this server fine-tunes its served model '" +
                              model_.id + "'",
                   .type = "invalid_request_error",
                   .param = "model",
                   .code = "model_not_found"};
  const jobs::FileRecord training = require_file(string_field(body, "training_file", true), "training_file");
  std::optional<jobs::FileRecord> validation;
  if (std::string v = string_field(body, "validation_file", false); !v.empty())
    validation = require_file(v, "validation_file");
  const std::string suffix = string_field(body, "suffix", false);
  if (suffix.size() > kMaxSuffixBytes ||
      suffix.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos)
    throw invalid_param(
        "suffix", "suffix: expected up to 64 letters, digits, '.', '_' or '-', got '" + suffix.substr(0, 80) + "'");
  jobs::JobSpec spec = jobs::parse_job_spec(body);
  const std::string wanted = spec.preference ? "preference" : "sft";
  for (const jobs::FileRecord* f :
       std::initializer_list<const jobs::FileRecord*>{&training, validation ? &*validation : nullptr}) {
    if (f && f->kind != wanted)
      throw ApiError{.status = 400,
                     .message = "file " + f->id + " (" + f->filename + ") holds " + f->kind + " rows; method '" +
                                spec.method_type + "' needs " +
                                (spec.preference ? "preference rows {prompt, chosen, rejected}"
                                                 : "SFT rows (messages, prompt/completion or text)"),
                     .type = "invalid_request_error",
                     .param = f == &training ? "training_file" : "validation_file",
                     .code = "file_kind_mismatch"};
  }
  json config = spec.options;
  config["model"] = model_.path;
  config["method"] = spec.method_type == "supervised" ? "sft" : spec.method_type;
  config["seed"] = spec.seed;
  if (!config.contains("device")) config["device"] = options_.default_device;
  jobs::JobRecord job{.id = jobs::random_id("ftjob"),
                      .created_at = jobs::now_seconds(),
                      .model = model_.id,
                      .training_file = training.id,
                      .suffix = suffix,
                      .seed = spec.seed,
                      .method = spec.method,
                      .method_type = spec.method_type};
  if (validation) job.validation_file = validation->id;
  job.total_steps = jobs::total_steps(config, training.rows);
  try {
    job.estimated_memory_bytes = jobs::estimate_memory_bytes(config, model_.shape);
  } catch (const Error& e) {
    throw ApiError{.status = 400,
                   .message = e.what(),
                   .type = "invalid_request_error",
                   .param = "method",
                   .code = "invalid_hyperparameter"};
  }
  // The child's config holds only `brioche train` keys; OpenAI's summary rides in the job record.
  json record_config = config;
  record_config["openai_hyperparameters"] = spec.hyperparameters;
  runner_->submit(job, record_config);
  return json_reply(200, job_json(require_job(job.id)));
}

namespace {

json body_object(const RouteRequest& r) {
  json body;
  try {
    body = parse_json_bounded(r.body, "the request body");
  } catch (const Error& e) {
    throw status_error(400, e.what());
  }
  if (!body.is_object())
    throw status_error(400, std::string("the request body must be a JSON object, got ") + body.type_name());
  return body;
}

}  // namespace

// POST /v1/fine_tuning/jobs/external {"model", "method", "total_steps", "config", "suffix"}:
// a `brioche train --report-to` run announces itself (docs/jobs-api.md).
RouteReply JobsApi::create_external_job(const RouteRequest& r) {
  const json body = body_object(r);
  const std::string model = string_field(body, "model", true);
  std::string method = string_field(body, "method", true);
  if (method == "sft") method = "supervised";
  if (method != "supervised" && method != "dpo" && method != "orpo" && method != "simpo" && method != "ipo")
    throw ApiError{.status = 400,
                   .message = "method: expected sft, dpo, orpo, simpo or ipo, got '" + method + "'",
                   .type = "invalid_request_error",
                   .param = "method",
                   .code = "invalid_method"};
  if (!body.contains("total_steps") || !body["total_steps"].is_number_integer() ||
      body["total_steps"].get<int64_t>() < 0)
    throw invalid_param("total_steps", "total_steps: expected a non-negative integer");
  const json config = body.contains("config") && body["config"].is_object() ? body["config"] : json::object();
  const std::string suffix = string_field(body, "suffix", false);
  jobs::JobRecord job{.id = jobs::random_id("ftjob"),
                      .created_at = jobs::now_seconds(),
                      .status = jobs::status::kRunning,
                      .model = model.substr(0, 256),
                      .suffix = suffix.substr(0, 64),
                      .seed = config.value("seed", 0),
                      .method = {{"type", method}},
                      .train_config = config,
                      .method_type = method,
                      .total_steps = body["total_steps"].get<int64_t>()};
  job.train_config["external"] = true;
  runner_->add_external(job);
  return json_reply(200, job_json(require_job(job.id)));
}

// POST /v1/fine_tuning/jobs/{id}/report {"rows": [log.jsonl rows], "status"?, "message"?}.
// The answer's status tells the trainer whether the job was cancelled here.
RouteReply JobsApi::report_external_job(const jobs::JobRecord& job, const RouteRequest& r) {
  if (!job.directory.empty())
    throw ApiError{.status = 409,
                   .message = "job " + job.id + " runs on this server; only --report-to jobs take reports",
                   .type = "invalid_request_error",
                   .param = "",
                   .code = "invalid_state"};
  const json body = body_object(r);
  if (body.contains("rows")) {
    if (!body["rows"].is_array() || body["rows"].size() > 10000)
      throw invalid_param("rows", "rows: expected an array of at most 10000 log rows");
    std::vector<json> rows(body["rows"].begin(), body["rows"].end());
    if (!rows.empty() && store_->transition(job.id, {jobs::status::kInterrupted}, jobs::status::kRunning))
      store_->add_event({.job_id = job.id,
                         .created_at = jobs::now_seconds(),
                         .level = "info",
                         .type = "message",
                         .message = "the reporting trainer is back"});
    runner_->record_rows(job.id, rows, std::nullopt);
  }
  const std::string to = string_field(body, "status", false);
  if (!to.empty()) {
    if (to != jobs::status::kSucceeded && to != jobs::status::kFailed && to != jobs::status::kInterrupted)
      throw invalid_param("status", "status: expected succeeded, failed or interrupted, got '" + to + "'");
    runner_->finish_external(job.id, to, string_field(body, "message", false).substr(0, 4000));
  }
  const jobs::JobRecord now = require_job(job.id);
  return json_reply(200, {{"id", now.id}, {"status", now.status}});
}

RouteReply JobsApi::job_events(const jobs::JobRecord& job, const RouteRequest& r) {
  const std::string after = query_string(r, "after");
  const int64_t after_seq = after.empty() ? 0 : event_seq(after);
  const std::string stream = query_string(r, "stream", "false");
  if (stream == "true" || stream == "1") {
    RouteReply reply{.status = 200, .content_type = "text/event-stream"};
    auto last = std::make_shared<int64_t>(after_seq);
    auto quiet_since = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
    jobs::JobStore* store = store_.get();
    const std::string id = job.id;
    reply.poll = [store, id, last, quiet_since](bool& done) {
      std::string out;
      // Read the status first: events written before a final status are all sent before [DONE].
      std::optional<jobs::JobRecord> now = store->job(id);
      for (const jobs::EventRecord& e : store->events_after(id, *last, 500)) {
        out += "data: " + dump_json(event_json(e)) + "\n\n";
        *last = e.seq;
      }
      if (out.empty() && (!now || !active(now->status))) {
        done = true;
        return std::string("data: [DONE]\n\n");
      }
      const auto t = std::chrono::steady_clock::now();
      if (!out.empty())
        *quiet_since = t;
      else if (t - *quiet_since > std::chrono::seconds(15))
        out = ": keep-alive\n\n", *quiet_since = t;
      return out;
    };
    return reply;
  }
  const int limit = int(query_int(r, "limit", 20, 1, 1000));
  jobs::Page<jobs::EventRecord> page = store_->events(job.id, after_seq, limit);
  json data = json::array();
  for (const jobs::EventRecord& e : page.items) data.push_back(event_json(e));
  return json_reply(200, {{"object", "list"}, {"data", data}, {"has_more", page.has_more}});
}

RouteReply JobsApi::job_metrics(const jobs::JobRecord& job, const RouteRequest& r) {
  const int64_t after_step = query_int(r, "after_step", -1, -1, INT32_MAX);
  json data = json::array();
  for (const jobs::MetricRow& m : store_->metrics(job.id, after_step)) data.push_back(m.row);
  return json_reply(200, {{"object", "list"},
                          {"job_id", job.id},
                          {"total_steps", job.total_steps},
                          {"best_margin_step", job.best_margin_step ? json(*job.best_margin_step) : json(nullptr)},
                          {"data", data}});
}

RouteReply JobsApi::job_checkpoints(const jobs::JobRecord& job, const RouteRequest& r) {
  const int limit = int(query_int(r, "limit", 10, 1, 1000));
  const std::string after = query_string(r, "after");
  std::map<int64_t, json> step_rows, eval_rows;
  for (const jobs::MetricRow& m : store_->metrics(job.id, -1))
    (m.kind == "step" ? step_rows : eval_rows)[m.step] = m.row;
  auto found = jobs::checkpoints(job.directory + "/output");
  const std::string name = "ft:" + job.model + ":" + job.suffix + ":" + job.id;
  json data = json::array();
  bool past_after = after.empty(), has_more = false;
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    const std::string id = "ftckpt-" + job.id + "-" + std::to_string(it->first);
    if (!past_after) {
      past_after = id == after;
      continue;
    }
    if (int(data.size()) == limit) {
      has_more = true;
      break;
    }
    json metrics = json::object();
    if (auto s = step_rows.find(it->first); s != step_rows.end()) {
      metrics = s->second;
      metrics["train_loss"] = s->second.value("loss", 0.0);
    }
    if (auto e = eval_rows.find(it->first); e != eval_rows.end())
      for (auto kv = e->second.begin(); kv != e->second.end(); ++kv)
        if (kv.key() != "step" && kv.key() != "kind") metrics["valid_" + kv.key()] = kv.value();
    const std::string model = name + ":ckpt-step-" + std::to_string(it->first);
    bool served = false;
    for (const json& s : job.served_models) served = served || s == model;
    std::error_code ec;
    const auto written = fs::last_write_time(it->second, ec);
    const int64_t created = ec ? job.created_at
                               : std::chrono::duration_cast<std::chrono::seconds>(
                                     std::chrono::file_clock::to_sys(written).time_since_epoch())
                                     .count();
    data.push_back({{"object", "fine_tuning.job.checkpoint"},
                    {"id", id},
                    {"created_at", created},
                    {"fine_tuning_job_id", job.id},
                    {"step_number", it->first},
                    {"fine_tuned_model_checkpoint", model},
                    {"metrics", metrics},
                    {"served", served}});
  }
  return json_reply(200, {{"object", "list"}, {"data", data}, {"has_more", has_more}});
}

}  // namespace brioche::server
