// /v1/files: uploads of training data (multipart), listing, content,
// deletion, and our preview (token lengths through the chat template).
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "jobs/jobs_error.h"
#include "server/api_error.h"
#include "server/jobs_api.h"
#include "server/multipart.h"

namespace brioche::server {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json file_json(const jobs::FileRecord& f) {
  return {{"id", f.id},
          {"object", "file"},
          {"bytes", f.bytes},
          {"created_at", f.created_at},
          {"filename", f.filename},
          {"purpose", f.purpose},
          {"status", "processed"},
          {"status_details", nullptr},
          {"expires_at", nullptr},
          {"kind", f.kind},
          {"rows", f.rows}};
}

ApiError multipart_error(const std::string& message) {
  return ApiError{
      .status = 400, .message = message, .type = "invalid_request_error", .param = "file", .code = "invalid_multipart"};
}

ApiError method_not_allowed(const RouteRequest& r, const std::string& allowed) {
  return status_error(405, "use " + allowed + " for " + r.path + " (got " + r.method + ")");
}

}  // namespace

RouteReply JobsApi::files_route(const RouteRequest& r) {
  if (r.path == "/v1/files") {
    if (r.method == "POST") return upload_file(r);
    if (r.method != "GET") throw method_not_allowed(r, "GET or POST");
    const std::string order = query_string(r, "order", "desc");
    if (order != "asc" && order != "desc")
      throw invalid_param("order", "query parameter 'order': expected asc or desc, got '" + order + "'");
    const int limit = int(query_int(r, "limit", 10000, 1, 10000));
    jobs::Page<jobs::FileRecord> page =
        store_->files(query_string(r, "purpose"), query_string(r, "after"), limit, order == "asc");
    json data = json::array();
    for (const jobs::FileRecord& f : page.items) data.push_back(file_json(f));
    return json_reply(200, {{"object", "list"},
                            {"data", data},
                            {"has_more", page.has_more},
                            {"first_id", page.items.empty() ? json(nullptr) : json(page.items.front().id)},
                            {"last_id", page.items.empty() ? json(nullptr) : json(page.items.back().id)}});
  }
  std::string rest = r.path.substr(std::string("/v1/files/").size());
  std::string action;
  if (size_t slash = rest.find('/'); slash != std::string::npos) action = rest.substr(slash + 1), rest.resize(slash);
  const jobs::FileRecord file = require_file(rest, "");
  if (action.empty()) {
    if (r.method == "GET") return json_reply(200, file_json(file));
    if (r.method != "DELETE") throw method_not_allowed(r, "GET or DELETE");
    store_->delete_file(file.id);
    std::error_code ec;
    fs::remove(file.path, ec);
    return json_reply(200, {{"id", file.id}, {"object", "file"}, {"deleted", true}});
  }
  if (r.method != "GET") throw method_not_allowed(r, "GET");
  if (action == "content") {
    std::ifstream in(file.path, std::ios::binary);
    std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return RouteReply{.status = 200, .content_type = "application/jsonl", .body = std::move(content)};
  }
  if (action == "preview") return preview_file(file, r);
  throw ApiError{.status = 404,
                 .message = "no route for " + r.method + " " + r.path,
                 .type = "invalid_request_error",
                 .param = "",
                 .code = "not_found"};
}

RouteReply JobsApi::upload_file(const RouteRequest& r) {
  std::vector<MultipartPart> parts;
  try {
    parts = parse_multipart(r.body, multipart_boundary(r.content_type), {});
  } catch (const Error& e) {
    throw multipart_error(e.what());
  }
  const MultipartPart* purpose = find_part(parts, "purpose");
  if (!purpose) throw invalid_param("purpose", "missing the 'purpose' field (expected 'fine-tune')");
  if (purpose->body != "fine-tune")
    throw ApiError{.status = 400,
                   .message = "purpose: expected 'fine-tune', got '" + std::string(purpose->body.substr(0, 64)) + "'",
                   .type = "invalid_request_error",
                   .param = "purpose",
                   .code = "invalid_purpose"};
  const MultipartPart* file = find_part(parts, "file");
  if (!file) throw multipart_error("missing the 'file' part (a JSONL file with a filename)");
  if (!file->filename)
    throw ApiError{.status = 400,
                   .message = "the 'file' part has no filename",
                   .type = "invalid_request_error",
                   .param = "file",
                   .code = "invalid_filename"};
  if (std::string problem = filename_problem(*file->filename); !problem.empty())
    throw ApiError{.status = 400,
                   .message = problem,
                   .type = "invalid_request_error",
                   .param = "file",
                   .code = "invalid_filename"};
  if (file->body.size() > options_.max_file_bytes)
    throw ApiError{.status = 413,
                   .message = "the file is " + std::to_string(file->body.size()) + " bytes, over the limit of " +
                              std::to_string(options_.max_file_bytes) + " (--max-file-bytes)",
                   .type = "invalid_request_error",
                   .param = "file",
                   .code = "file_too_large"};
  if (file->body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    throw ApiError{.status = 400,
                   .message = *file->filename + ": the file is empty (expected JSONL, one example per line)",
                   .type = "invalid_request_error",
                   .param = "file",
                   .code = "invalid_file"};
  jobs::FileRecord record{.id = jobs::random_id("file"),
                          .filename = *file->filename,
                          .bytes = int64_t(file->body.size()),
                          .created_at = jobs::now_seconds(),
                          .purpose = "fine-tune"};
  record.path = options_.data_dir + "/files/" + record.id + ".jsonl";
  const std::string partial = record.path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary);
    out.write(file->body.data(), std::streamsize(file->body.size()));
    if (!out.good()) throw status_error(500, "cannot write the upload to " + partial);
  }
  try {
    jobs::FileCheck check = jobs::check_training_file(partial, record.filename, model_.text);
    record.kind = check.kind;
    record.rows = check.rows;
  } catch (...) {
    std::error_code ec;
    fs::remove(partial, ec);
    throw;
  }
  fs::rename(partial, record.path);
  store_->add_file(record);
  return json_reply(200, file_json(record));
}

RouteReply JobsApi::preview_file(const jobs::FileRecord& file, const RouteRequest& r) {
  const std::string model = query_string(r, "model", model_.id);
  if (model != model_.id)
    throw ApiError{.status = 400,
                   .message = "model '" + model + "': previews use the served model '" + model_.id + "'",
                   .type = "invalid_request_error",
                   .param = "model",
                   .code = "model_not_found"};
  const int max_length = int(query_int(r, "max_length", 2048, 2, 1 << 24));
  jobs::FilePreview p = jobs::preview_file(file.path, file.filename, model_.text, max_length, 5);
  json lengths = {{"histogram", {{"edges", p.histogram.edges}, {"counts", p.histogram.counts}}}};
  if (!p.lengths.empty()) {
    std::vector<int64_t> sorted = p.lengths;
    std::sort(sorted.begin(), sorted.end());
    double sum = 0;
    for (int64_t n : sorted) sum += double(n);
    auto pct = [&](double q) {
      return sorted[std::min(sorted.size() - 1, size_t(q * double(sorted.size() - 1) + 0.5))];
    };
    lengths["min"] = sorted.front();
    lengths["max"] = sorted.back();
    lengths["mean"] = sum / double(sorted.size());
    lengths["p50"] = pct(0.5);
    lengths["p95"] = pct(0.95);
  }
  return json_reply(200, {{"object", "file.preview"},
                          {"id", file.id},
                          {"kind", p.kind},
                          {"rows", p.rows},
                          {"max_length", max_length},
                          {"truncated_rows", p.truncated_rows},
                          {"sample", p.sample},
                          {"token_lengths", lengths}});
}

}  // namespace brioche::server
