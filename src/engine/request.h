// A generation request, the events it produces, and the handle a caller holds.
//
// Requests come from any thread (HTTP workers, the CLI); the engine thread
// pushes events into the request's handle. A caller either blocks on
// RequestHandle::next() or registers `on_events`, which the engine thread
// calls (cheaply: it should only post a wake-up) after new events are queued.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/constraint.h"
#include "engine/sampler.h"
#include "model/served_adapter.h"

namespace brioche::engine {

enum class FinishReason : uint8_t {
  Stop,       // eos token, a stop string, or the grammar terminated
  Length,     // max_tokens or the context length
  Cancelled,  // the caller cancelled (client gone, timeout, shutdown)
  Error,      // the request could not run (see GenerationEvent::error)
};
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "cancelled", "error"

struct GenerationRequest {
  std::vector<int32_t> prompt_tokens;  // already tokenized (chat template applied by the caller)
  SamplingParams sampling;
  int32_t max_tokens = 256;       // generated tokens per choice; clipped by the context
                                  // (0: score the prompt only, with prompt_logprobs)
  std::vector<std::string> stop;  // stop strings (not included in the output)
  bool ignore_eos = false;
  int32_t n = 1;              // choices; forks share the prompt's KV blocks
  int32_t top_logprobs = -1;  // -1: no logprobs; 0..20: chosen token + that many alternatives
  // Also the logprob of every prompt token after the first (log p(t_i | t_<i),
  // with top_logprobs alternatives): OpenAI completions' `echo` + `logprobs`,
  // which loglikelihood scoring (lm-evaluation-harness) relies on. Choice 0
  // then computes its whole prompt (no prefix-cache reuse: the cached rows'
  // logits are gone). Needs top_logprobs >= 0.
  bool prompt_logprobs = false;
  GrammarConstraint constraint;  // structured output; compiled == null: free text
  // The LoRA adapter the request runs with, unmerged (null: the base model).
  // Held until the request ends, so unloading it lets running requests finish.
  std::shared_ptr<const model::ServedAdapter> adapter;
  std::function<void()> on_events;  // called on the engine thread after events were queued
  // false: never speculated, even when the engine speculates (same output
  // either way; for timing comparisons or a proposer that does not pay).
  bool speculative = true;
};

struct TopLogprob {
  int32_t token = 0;
  std::string text;  // the token's bytes (may be part of a UTF-8 character)
  float logprob = 0;
};

struct TokenLogprob {
  int32_t token = 0;
  std::string text;
  float logprob = 0;
  std::vector<TopLogprob> top;  // best first
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;     // over all choices
  int32_t cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache (choice 0)
};

// One step's output for one choice, or the request's final summary.
struct GenerationEvent {
  int32_t choice = 0;
  std::string text;                    // text delta (stop strings withheld/removed)
  std::vector<int32_t> tokens;         // ids generated in this delta
  std::vector<TokenLogprob> logprobs;  // one per token, when requested
  // With GenerationRequest::prompt_logprobs: prompt tokens 1..n-1, in choice
  // 0's first event (before any generated token's).
  std::vector<TokenLogprob> prompt_logprobs;
  std::optional<FinishReason> finish;  // this choice is over
  std::string error;                   // with FinishReason::Error
  bool done = false;                   // last event of the request: usage is filled
  Usage usage;
};

class RequestHandle {
 public:
  explicit RequestHandle(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }

  // Blocks until an event is queued; nullopt once the final (done) event was taken.
  std::optional<GenerationEvent> next();
  // Blocks up to `timeout`; nullopt on timeout or when finished.
  std::optional<GenerationEvent> next_for(std::chrono::milliseconds timeout);
  // All queued events, without blocking.
  std::vector<GenerationEvent> drain();
  bool finished() const { return finished_.load(); }
  // Asks the engine to stop this request; its blocks are freed at the next
  // step and a Cancelled finish event follows. Safe from any thread.
  void cancel() { cancelled_.store(true); }
  bool cancel_requested() const { return cancelled_.load(); }

  // Engine side.
  void push(GenerationEvent event);

 private:
  uint64_t id_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<GenerationEvent> events_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> finished_{false};  // the done event was pushed
  bool taken_done_ = false;
};

}  // namespace brioche::engine
