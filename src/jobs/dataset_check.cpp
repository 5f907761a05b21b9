#include "jobs/dataset_check.h"

#include <algorithm>
#include <cctype>
#include <fstream>

#include "core/error.h"
#include "jobs/jobs_error.h"

namespace brioche::jobs {

namespace {

// load_dataset names the file by its path (a server path the client never
// saw); errors name the upload's display name instead.
[[noreturn]] void invalid_file(const std::string& path, const std::string& display_name, const std::string& what) {
  std::string message = what;
  if (message.rfind(path, 0) == 0) message = display_name + message.substr(path.size());
  // "name:12: ..." reads better as "name line 12: ..."
  const size_t colon = display_name.size();
  if (message.size() > colon + 1 && message[colon] == ':' &&
      std::isdigit(static_cast<unsigned char>(message[colon + 1])))
    message = display_name + " line " + message.substr(colon + 1);
  throw JobsError(400, "invalid_file", "file", message);
}

// The first non-blank line's kind; "" when there is none or it is not an object.
std::string first_row_kind(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    return row.is_object() ? row_kind(row) : "";
  }
  return "";
}

train::Dataset load(const std::string& path, const std::string& display_name, const ModelText& model, bool preference) {
  try {
    return train::load_dataset(path, {.preference = preference,
                                      .max_seq_length = 1 << 30,
                                      .tokenizer = model.tokenizer,
                                      .render = model.render,
                                      .quiet = true});
  } catch (const Error& e) {
    invalid_file(path, display_name, e.what());
  } catch (const std::exception& e) {  // a template that throws something else
    invalid_file(path, display_name, e.what());
  }
}

}  // namespace

std::string row_kind(const nlohmann::json& row) {
  const nlohmann::json& r = row.contains("dpo") && row["dpo"].is_object() ? row["dpo"] : row;
  return r.contains("chosen") || r.contains("rejected") ? "preference" : "sft";
}

FileCheck check_training_file(const std::string& path, const std::string& display_name, const ModelText& model) {
  const std::string kind = first_row_kind(path);
  const train::Dataset ds = load(path, display_name, model, kind == "preference");
  return {.kind = kind.empty() ? "sft" : kind, .rows = int64_t(ds.size())};
}

Histogram length_histogram(const std::vector<int64_t>& lengths, int max_buckets) {
  Histogram h;
  if (lengths.empty()) return h;
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  int64_t width = (longest + 1 + max_buckets - 1) / max_buckets;
  width = std::max<int64_t>(8, (width + 7) / 8 * 8);
  const int64_t buckets = longest / width + 1;
  for (int64_t i = 0; i <= buckets; ++i) h.edges.push_back(i * width);
  h.counts.assign(size_t(buckets), 0);
  for (int64_t n : lengths) ++h.counts[size_t(n / width)];
  return h;
}

FilePreview preview_file(const std::string& path, const std::string& display_name, const ModelText& model,
                         int max_length, int sample_rows) {
  FilePreview p;
  p.kind = first_row_kind(path);
  if (p.kind.empty()) p.kind = "sft";
  const train::Dataset ds = load(path, display_name, model, p.kind == "preference");
  p.rows = int64_t(ds.size());
  for (const train::TokenizedExample& e : ds.examples)
    p.lengths.push_back(int64_t(e.prompt.size() + e.response.size()));
  for (const train::TokenizedPair& pair : ds.pairs)
    p.lengths.push_back(int64_t(pair.prompt.size() + std::max(pair.chosen.size(), pair.rejected.size())));
  for (int64_t n : p.lengths) p.truncated_rows += n > max_length ? 1 : 0;
  p.histogram = length_histogram(p.lengths, 20);
  std::ifstream in(path);
  std::string line;
  while (int(p.sample.size()) < sample_rows && std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    p.sample.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return p;
}

}  // namespace brioche::jobs
