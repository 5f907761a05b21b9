#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace brioche::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard lock(mutex_);
  ++counts_[i];
  sum_ += value;
  ++count_;
}

static std::string fmt_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard lock(mutex_);
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + fmt_double(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  out += name + "_sum " + fmt_double(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_seconds({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      inter_token_seconds({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      request_seconds({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

void Metrics::add_tokens(const std::string& model, int64_t prompt, int64_t generated) {
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
  std::lock_guard lock(mutex_);
  ModelCounts& c = by_model_[model];
  ++c.requests;
  c.prompt_tokens += uint64_t(prompt);
  c.generated_tokens += uint64_t(generated);
}

namespace {

// A Prometheus label value: backslash, quote and newline escaped.
std::string label_value(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\\' || ch == '"') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out;
}

}  // namespace

std::string Metrics::render(const engine::EngineStats& e, const AdapterCounts& adapters) const {
  std::string out;
  auto counter = [&](const char* name, const char* help, double v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " + fmt_double(v) +
           "\n";
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " + fmt_double(v) +
           "\n";
  };
  out += "# HELP brioche_requests_total HTTP requests by endpoint and status.\n# TYPE brioche_requests_total counter\n";
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, n] : requests_)
      out += "brioche_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
             std::to_string(n) + "\n";
  }
  counter("brioche_prompt_tokens_total", "Prompt tokens of finished requests.", double(prompt_tokens_.load()));
  counter("brioche_generation_tokens_total", "Tokens generated for finished requests.",
          double(generated_tokens_.load()));
  counter("brioche_cancelled_requests_total", "Requests cancelled (client gone, timeout, shutdown).",
          double(cancelled_requests.load()));
  gauge("brioche_requests_in_flight", "Generation requests accepted and not finished.", double(in_flight.load()));
  gauge("brioche_open_connections", "Open HTTP connections.", double(open_connections.load()));
  gauge("brioche_queue_depth", "Sequences waiting for the scheduler (new or preempted).", double(e.waiting));
  gauge("brioche_running_sequences", "Sequences holding KV blocks.", double(e.running));
  gauge("brioche_kv_blocks_total", "KV cache blocks.", double(e.kv_blocks_total));
  gauge("brioche_kv_blocks_used", "KV cache blocks held by sequences.", double(e.kv_blocks_used));
  gauge("brioche_kv_blocks_cached", "Free KV blocks keeping a reusable prefix.", double(e.kv_blocks_cached));
  gauge("brioche_kv_window_blocks_total", "Sliding-window layers' KV blocks (0: they use the main blocks).",
        double(e.kv_window_blocks_total));
  gauge("brioche_kv_window_blocks_used", "Sliding-window layers' KV blocks held by sequences.",
        double(e.kv_window_blocks_used));
  gauge("brioche_kv_usage_ratio", "Fraction of KV blocks in use.",
        e.kv_blocks_total ? double(e.kv_blocks_used) / double(e.kv_blocks_total) : 0.0);
  counter("brioche_prefix_cache_hit_blocks_total", "KV blocks reused from the prefix cache.",
          double(e.prefix_hit_blocks));
  counter("brioche_prefix_cache_query_blocks_total", "Full prompt blocks looked up in the prefix cache.",
          double(e.prefix_query_blocks));
  counter("brioche_prefix_cache_partial_tokens_total",
          "Prompt positions whose K/V were copied from a partly shared cached block.",
          double(e.prefix_hit_partial_tokens));
  counter("brioche_preemptions_total", "Sequences preempted for lack of KV blocks.", double(e.preemptions));
  counter("brioche_engine_steps_total", "Engine steps (batched forwards).", double(e.steps));
  counter("brioche_engine_overlapped_steps_total",
          "Decode steps queued on the GPU before the host had the tokens they read.", double(e.overlapped_steps));
  counter("brioche_spec_verify_steps_total", "Sequence-steps that verified speculative draft tokens.",
          double(e.spec_verify_steps));
  counter("brioche_spec_draft_tokens_total", "Speculative draft tokens proposed and verified.",
          double(e.spec_draft_tokens));
  counter("brioche_spec_accepted_tokens_total", "Speculative draft tokens the model accepted.",
          double(e.spec_accepted_tokens));
  gauge("brioche_spec_acceptance_rate", "Accepted / proposed draft tokens since start (0 without drafts).",
        e.spec_draft_tokens ? double(e.spec_accepted_tokens) / double(e.spec_draft_tokens) : 0.0);
  gauge("brioche_spec_mean_accepted_length", "Accepted draft tokens per verify step since start.",
        e.spec_verify_steps ? double(e.spec_accepted_tokens) / double(e.spec_verify_steps) : 0.0);
  gauge("brioche_lora_adapters_loaded", "LoRA adapters served as models.", double(adapters.loaded));
  gauge("brioche_lora_adapters_resident", "LoRA adapters with factors on the device now.", double(adapters.resident));
  {
    std::lock_guard lock(mutex_);
    const std::pair<const char*, uint64_t ModelCounts::*> per_model[] = {
        {"brioche_model_requests_total", &ModelCounts::requests},
        {"brioche_model_prompt_tokens_total", &ModelCounts::prompt_tokens},
        {"brioche_model_generation_tokens_total", &ModelCounts::generated_tokens}};
    for (const auto& [name, field] : per_model) {
      out += std::string("# HELP ") + name +
             " Finished generations by the model (base or adapter) they named.\n# TYPE " + name + " counter\n";
      for (const auto& [model, counts] : by_model_)
        out += std::string(name) + "{model=\"" + label_value(model) + "\"} " + std::to_string(counts.*field) + "\n";
    }
  }
  ttft_seconds.write(out, "brioche_time_to_first_token_seconds",
                     "Time from request arrival to the first generated token.");
  inter_token_seconds.write(out, "brioche_inter_token_latency_seconds",
                            "Time between consecutive generated tokens of a sequence.");
  request_seconds.write(out, "brioche_request_duration_seconds",
                        "Time from request arrival to the last byte of the answer.");
  return out;
}

}  // namespace brioche::server
