// Server metrics in the Prometheus text exposition format (GET /metrics).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace brioche::server {

// A fixed-bucket histogram (cumulative counts as Prometheus expects on output).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends "<name>_bucket{le=...} n", "_sum", "_count" lines.
  void write(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // [bounds + 1], last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct AdapterCounts {
  int loaded = 0, resident = 0;
};

class Metrics {
 public:
  Metrics();
  void count_request(const std::string& endpoint, int status);
  // A finished generation's tokens, counted overall and under the model id
  // it named (the base model's or an adapter's).
  void add_tokens(const std::string& model, int64_t prompt, int64_t generated);
  Histogram ttft_seconds;
  Histogram inter_token_seconds;
  Histogram request_seconds;
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> open_connections{0};
  std::atomic<int64_t> cancelled_requests{0};

  std::string render(const engine::EngineStats& engine, const AdapterCounts& adapters = {}) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  struct ModelCounts {
    uint64_t requests = 0, prompt_tokens = 0, generated_tokens = 0;
  };
  std::map<std::string, ModelCounts> by_model_;
  std::atomic<int64_t> prompt_tokens_{0};
  std::atomic<int64_t> generated_tokens_{0};
};

}  // namespace brioche::server
