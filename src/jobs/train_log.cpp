#include "jobs/train_log.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "train/train_state.h"

namespace brioche::jobs {

namespace fs = std::filesystem;
using json = nlohmann::json;

LogChunk read_log_lines(const std::string& path, int64_t offset) {
  LogChunk chunk{.next_offset = offset};
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return chunk;
  if (int64_t(size) < offset) offset = 0, chunk.next_offset = 0;
  if (int64_t(size) == offset) return chunk;
  std::ifstream in(path, std::ios::binary);
  in.seekg(offset);
  std::string data(size_t(int64_t(size) - offset), '\0');
  in.read(data.data(), std::streamsize(data.size()));
  data.resize(size_t(in.gcount()));
  size_t start = 0;
  for (size_t nl = data.find('\n'); nl != std::string::npos; nl = data.find('\n', start)) {
    json row = json::parse(data.begin() + int64_t(start), data.begin() + int64_t(nl), nullptr, false);
    if (row.is_object()) chunk.rows.push_back(std::move(row));
    start = nl + 1;
  }
  chunk.next_offset = offset + int64_t(start);
  return chunk;
}

std::optional<MetricRow> metric_row(const json& log_row) {
  if (!log_row.contains("event") || !log_row["event"].is_string() || !log_row.contains("step") ||
      !log_row["step"].is_number_integer())
    return std::nullopt;
  const std::string kind = log_row["event"];
  if (kind != "step" && kind != "eval") return std::nullopt;
  MetricRow m{.kind = kind, .step = log_row["step"].get<int64_t>(), .row = log_row};
  m.row.erase("event");
  m.row["kind"] = kind;
  return m;
}

EventRecord metric_event(const std::string& job_id, const MetricRow& m, int64_t total_steps) {
  auto number = [&](const char* key) {
    return m.row.contains(key) && m.row[key].is_number() ? m.row[key].get<double>() : 0.0;
  };
  char message[256];
  json data = m.row;
  data["total_steps"] = total_steps;
  if (m.kind == "step") {
    std::snprintf(message, sizeof message, "step %lld/%lld: loss %.4f", (long long)m.step, (long long)total_steps,
                  number("loss"));
    data["train_loss"] = number("loss");
  } else if (m.row.contains("margin") && m.row.contains("rewards/margins")) {
    std::snprintf(message, sizeof message, "eval step %lld: loss %.4f, accuracy %.3f, margin %.4f", (long long)m.step,
                  number("loss"), number("accuracy"), number("margin"));
    data["valid_loss"] = number("loss");
  } else {
    std::snprintf(message, sizeof message, "eval step %lld: loss %.4f", (long long)m.step, number("loss"));
    data["valid_loss"] = number("loss");
  }
  return EventRecord{.job_id = job_id,
                     .created_at = now_seconds(),
                     .level = "info",
                     .type = "metrics",
                     .message = message,
                     .data = data};
}

std::vector<std::pair<int64_t, std::string>> checkpoints(const std::string& output_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  const fs::path root = fs::path(output_dir) / "checkpoints";
  if (!fs::is_directory(root, ec)) return found;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step_", 0) == 0 && name.size() > 5 && name.size() < 15 &&
        name.find_first_not_of("0123456789", 5) == std::string::npos)
      found.emplace_back(std::stoll(name.substr(5)), e.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string newest_checkpoint(const std::string& output_dir) {
  auto found = checkpoints(output_dir);
  for (auto it = found.rbegin(); it != found.rend(); ++it)
    if (train::has_train_state(it->second)) return it->second;
  return "";
}

std::string file_tail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const int64_t size = in.tellg();
  const int64_t start = std::max<int64_t>(0, size - int64_t(max_bytes));
  in.seekg(start);
  std::string text(size_t(size - start), '\0');
  in.read(text.data(), std::streamsize(text.size()));
  if (start > 0) {
    const size_t nl = text.find('\n');
    if (nl != std::string::npos && nl + 1 < text.size()) text = text.substr(nl + 1);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

}  // namespace brioche::jobs
