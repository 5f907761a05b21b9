// Reading what a `brioche train` child writes while it runs: OUTPUT/log.jsonl
// (one JSON object per step and per evaluation, appended and flushed), its
// checkpoints, and the tail of its stderr.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jobs/store.h"

namespace brioche::jobs {

struct LogChunk {
  std::vector<nlohmann::json> rows;  // complete lines only; a line still being written waits for the next read
  int64_t next_offset = 0;
};

// The complete lines of `path` from byte `offset` on. A file shorter than
// `offset` was started over (a run restarted with --overwrite): read from 0.
// Lines that are not JSON objects are skipped.
LogChunk read_log_lines(const std::string& path, int64_t offset);

// A log row as a metric row: its "event" ("step" | "eval") becomes the kind.
std::optional<MetricRow> metric_row(const nlohmann::json& log_row);

// The event a metric row becomes: "step 6/20: loss 1.2345", "eval step 10: loss ..., margin ...".
EventRecord metric_event(const std::string& job_id, const MetricRow& row, int64_t total_steps);

// The newest resumable checkpoint under OUTPUT/checkpoints (step_N with a
// trainer state), or "" when there is none.
std::string newest_checkpoint(const std::string& output_dir);
// step_N directories under OUTPUT/checkpoints, by step ascending.
std::vector<std::pair<int64_t, std::string>> checkpoints(const std::string& output_dir);

// The last `max_bytes` of a file (from a line start when one is near), or "".
std::string file_tail(const std::string& path, size_t max_bytes);

}  // namespace brioche::jobs
