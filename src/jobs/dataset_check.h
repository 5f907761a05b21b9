// Training files checked as `brioche train` will read them: every line
// parsed, rendered through the model's chat template and tokenized
// (train/dataset.h), so a file that uploads is a file that trains.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/dataset.h"

namespace brioche::jobs {

struct ModelText {
  const tokenizer::Tokenizer* tokenizer = nullptr;
  train::ChatRenderer render;
};

struct FileCheck {
  std::string kind;  // sft | preference (the first row's)
  int64_t rows = 0;
};

// Throws JobsError 400 invalid_file naming `display_name`, the line and
// what is wrong (an empty file: "no examples").
FileCheck check_training_file(const std::string& path, const std::string& display_name, const ModelText& model);

struct Histogram {
  std::vector<int64_t> edges;  // bucket i: edges[i] <= length < edges[i+1]
  std::vector<int64_t> counts;
};

struct FilePreview {
  std::string kind;
  int64_t rows = 0;
  int64_t truncated_rows = 0;  // rows longer than max_length (brioche train cuts them)
  std::vector<nlohmann::json> sample;
  std::vector<int64_t> lengths;  // tokens per row: prompt + response (the longer of chosen/rejected)
  Histogram histogram;
};

FilePreview preview_file(const std::string& path, const std::string& display_name, const ModelText& model,
                         int max_length, int sample_rows);

// Equal-width buckets over [0, max], at most `max_buckets`, widths rounded up to a multiple of 8.
Histogram length_histogram(const std::vector<int64_t>& lengths, int max_buckets);

// The kind a row's keys say: preference when it has "chosen"/"rejected"
// (also under "dpo"), else sft.
std::string row_kind(const nlohmann::json& row);

}  // namespace brioche::jobs
