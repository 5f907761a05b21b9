#include "data/split.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "engine/rng.h"

namespace brioche::data {

namespace fs = std::filesystem;

SplitRows split_rows(std::vector<json> rows, double valid_fraction, uint64_t seed) {
  const size_t n = rows.size();
  size_t n_valid = size_t(std::llround(valid_fraction * double(n)));
  if (n_valid >= n) n_valid = n > 0 ? n - 1 : 0;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  engine::SamplerRng rng(seed);
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[size_t(rng.next_u64() % i)]);
  std::vector<bool> to_valid(n, false);
  for (size_t i = 0; i < n_valid; ++i) to_valid[order[i]] = true;
  SplitRows out;
  for (size_t i = 0; i < n; ++i) (to_valid[i] ? out.valid : out.train).push_back(std::move(rows[i]));
  return out;
}

void write_jsonl(const std::string& path, const std::vector<json>& rows) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  BRIOCHE_CHECK(out.good(), "cannot write ", path);
  for (const json& row : rows) out << row.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  out.flush();
  BRIOCHE_CHECK(out.good(), "writing ", path, " failed (disk full?)");
}

namespace {

bool single_file(const std::string& out) { return out.size() > 6 && out.ends_with(".jsonl"); }

std::vector<std::string> planned(const OutputOptions& o, bool with_valid) {
  if (single_file(o.out))
    return o.stats_path.empty() ? std::vector<std::string>{o.out} : std::vector<std::string>{o.out, o.stats_path};
  std::vector<std::string> files = {(fs::path(o.out) / "train.jsonl").string()};
  if (with_valid) files.push_back((fs::path(o.out) / "valid.jsonl").string());
  files.push_back(o.stats_path.empty() ? (fs::path(o.out) / "stats.json").string() : o.stats_path);
  return files;
}

}  // namespace

void check_output(const OutputOptions& o, double valid_fraction) {
  BRIOCHE_CHECK(!o.out.empty(), "no output: pass -o DIR (train.jsonl, valid.jsonl, stats.json) or -o FILE.jsonl");
  if (single_file(o.out))
    BRIOCHE_CHECK(valid_fraction == 0, "-o ", o.out, " is one file: a --valid-fraction split needs -o DIR");
  else
    BRIOCHE_CHECK(!fs::exists(o.out) || fs::is_directory(o.out), "-o ", o.out,
                  " exists and is not a directory (expected a directory, or a FILE.jsonl)");
  if (o.overwrite) return;
  for (const std::string& f : planned(o, true))
    BRIOCHE_CHECK(!fs::exists(f), f, " exists: pass --overwrite to replace it, or another -o");
}

std::vector<std::string> write_output(const OutputOptions& o, const SplitRows& rows, const json& stats) {
  const std::vector<std::string> files = planned(o, !rows.valid.empty());
  if (!single_file(o.out))
    fs::create_directories(o.out);
  else if (fs::path(o.out).has_parent_path())
    fs::create_directories(fs::path(o.out).parent_path());
  write_jsonl(files[0], rows.train);
  if (!single_file(o.out) && !rows.valid.empty()) write_jsonl(files[1], rows.valid);
  if (!single_file(o.out) && rows.valid.empty()) {
    // A valid.jsonl left from an earlier run would be read by `brioche train` as this data's split.
    std::error_code ec;
    if (o.overwrite) fs::remove(fs::path(o.out) / "valid.jsonl", ec);
  }
  if (files.size() > (single_file(o.out) ? 1u : 1u + !rows.valid.empty())) {
    std::ofstream out(files.back(), std::ios::trunc);
    BRIOCHE_CHECK(out.good(), "cannot write ", files.back());
    out << stats.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  }
  return files;
}

}  // namespace brioche::data
