// Test helper: the cases tools/oracle/lora_case.py writes (case.json: token
// sequences and the oracle's loss) as a TokenBatch scoring every next token,
// and the error measure the LoRA-gradient tests compare with.
#pragma once

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "train/lora_tensors.h"
#include "train/token_batch.h"

namespace brioche::train {

struct LoraOracleCase {
  TokenBatch batch;
  double loss = 0.0;  // the oracle's mean NLL of every next token
};

inline LoraOracleCase read_lora_oracle_case(const std::string& case_json) {
  std::ifstream in(case_json);
  BRIOCHE_CHECK(in.good(), "read_lora_oracle_case: cannot open ", case_json);
  const nlohmann::json j = nlohmann::json::parse(in);
  LoraOracleCase c;
  c.loss = j["loss"].get<double>();
  int32_t row = 0;
  for (const auto& seq : j["sequences"]) {
    const auto ids = seq.get<std::vector<int32_t>>();
    c.batch.spans.push_back({row, int32_t(ids.size())});
    for (size_t i = 0; i < ids.size(); ++i) {
      c.batch.tokens.push_back(ids[i]);
      c.batch.positions.push_back(int32_t(i));
      if (i + 1 < ids.size())
        c.batch.scored.push_back({.row = row + int32_t(i), .target = ids[i + 1], .sequence = c.batch.n_sequences});
    }
    row += int32_t(ids.size());
    ++c.batch.n_sequences;
  }
  return c;
}

// max |a − b| / max(floor, max |b|) over a tensor pair.
inline double lora_relative_error(const Tensor& got, const Tensor& want, double floor) {
  const Tensor a = copy_f32(got), b = copy_f32(want);
  double err = 0.0, scale = 0.0;
  for (int64_t i = 0; i < b.numel(); ++i) scale = std::max(scale, double(std::abs(b.data_as<float>()[i])));
  for (int64_t i = 0; i < b.numel(); ++i)
    err = std::max(err, double(std::abs(a.data_as<float>()[i] - b.data_as<float>()[i])));
  return err / std::max(scale, floor);
}

}  // namespace brioche::train
