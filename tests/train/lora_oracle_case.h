// Test helper: the cases tools/oracle/lora_case.py writes (case.json: token
// sequences and the oracle's loss) as a TokenBatch scoring every next token,
// the error measure the LoRA-gradient tests compare with, and the check
// that a preference pair's prefix-shared layout equals its plain one.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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

// One preference pair through a training model: the scored log-probs, the
// LoRA factors' gradients (a, b per entry) and the rows the batch took.
struct PairRun {
  std::vector<float> logp;
  std::vector<Tensor> grads;
  int64_t rows = 0;
};

// The pair in the prefix-shared layout against the same pair laid out
// plainly: `saved_rows` fewer rows (each prompt run once), the same
// log-probs and gradients within 1e-4 (f32 rounding: sums run in another
// order; gradients relative to each tensor's largest, floored at
// grad_floor), and gradients that are not all zero.
inline void expect_prefix_shared_equals_plain(const std::string& name, const PairRun& plain, const PairRun& shared,
                                              int64_t saved_rows, double grad_floor) {
  ASSERT_EQ(plain.logp.size(), shared.logp.size());
  ASSERT_EQ(plain.grads.size(), shared.grads.size());
  double logp_err = 0.0, grad_err = 0.0, size = 0.0;
  for (size_t i = 0; i < plain.logp.size(); ++i)
    logp_err = std::max(logp_err, double(std::abs(plain.logp[i] - shared.logp[i])));
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    grad_err = std::max(grad_err, lora_relative_error(shared.grads[i], plain.grads[i], grad_floor));
    for (int64_t j = 0; j < plain.grads[i].numel(); ++j)
      size = std::max(size, double(std::abs(plain.grads[i].data_as<float>()[j])));
  }
  std::printf(
      "%s prefix-shared: %zu log-probs within %.2e, %zu gradient tensors within %.2e (relative) of the "
      "plain layout\n",
      name.c_str(), plain.logp.size(), logp_err, plain.grads.size(), grad_err);
  EXPECT_EQ(shared.rows, plain.rows - saved_rows) << name << ": each prompt runs once";
  EXPECT_LT(logp_err, 1e-4) << name;
  EXPECT_LT(grad_err, 1e-4) << name;
  EXPECT_GT(size, 1e-3) << name << ": the gradients are not all zero";
}

}  // namespace brioche::train
