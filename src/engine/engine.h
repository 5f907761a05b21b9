// The inference engine: one thread that owns the model and runs steps.
//
//   auto engine = Engine::load({.model_path = path});
//   GenerationRequest req{.prompt_tokens = engine->tokenize("Hello")};
//   engine->generate(req, [](const GenerationEvent& e) { fputs(e.text.c_str(), stdout); });
//
// Any thread may submit() or cancel(); events flow back through the
// RequestHandle. Each step the engine thread
//   1. drops cancelled requests (freeing their KV blocks),
//   2. gives every running sequence one decode token, allocating a KV block
//      when it crosses a block boundary; if none is left it preempts the
//      newest sequences (blocks freed, requeued, recomputed later - never dropped),
//   3. fills the rest of the token budget with chunked prefill of running
//      and then waiting sequences, reusing cached prefix blocks,
//   4. runs one ragged forward over all rows and samples the sequences whose
//      last row produced logits.
// Determinism: every row of the CPU forward is computed independently of the
// other rows in the batch and each sequence has its own seeded sampler, so a
// seeded request produces the same tokens alone or batched, and after a
// preemption (recompute gives the same K/V).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "engine/model_runner.h"
#include "engine/proposer.h"
#include "engine/request.h"

namespace brioche::model {
class Model;
}
namespace brioche::tokenizer {
class Tokenizer;
}

namespace brioche::engine {

struct SchedulerOptions {
  int32_t max_batch_tokens = 512;  // rows per forward (decodes + prefill chunks)
  int32_t max_running = 64;        // sequences holding KV blocks at once
  bool prefix_cache = true;
  // Speculative decoding by prompt lookup (docs/speculative.md): draft
  // tokens per sequence and step; 0: off.
  int32_t speculative_tokens = 0;
  int32_t speculative_min_ngram = 1;  // n-gram lengths matched, longest first
  int32_t speculative_max_ngram = 3;
  // A step with more decoding sequences than this does not speculate: the
  // forward is then bound by compute, not by reading the weights, and
  // verifying k drafts costs about k decodes.
  int32_t speculative_max_batch = 4;
  // Per-sequence length adapted to its acceptance rate, up to
  // speculative_tokens (engine/speculation_length.h); false: always
  // speculative_tokens.
  bool speculative_adaptive = true;
  // One more verify row's cost relative to a decode step, for the adaptive
  // length (measured for the default model on the CPU: docs/speculative.md).
  double speculative_row_cost = 0.1;
  // Proposers draft under the request's grammar (a draft model samples from
  // its logits masked by it; prompt lookup passes over matches it forbids);
  // false: drafts are proposed blind and cut at the first forbidden token
  // (for measuring the difference: bench/spec_grammar_bench.cpp).
  bool speculative_grammar_drafts = true;
};

struct EngineOptions {
  std::string model_path;
  Device device = Device::CPU;  // where weights, activations and the KV cache live
  KvSizing kv;
  SchedulerOptions scheduler;
  // Speculative decoding with this draft model (same tokenizer as the
  // target, loaded on the same device; with scheduler.speculative_tokens >
  // 0). The KV budget is split so that both caches hold the same positions.
  std::shared_ptr<model::Model> draft_model;
};

struct EngineStats {
  int32_t waiting = 0;  // sequences queued (new or preempted)
  int32_t running = 0;  // sequences holding KV blocks
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_used = 0;
  int32_t kv_blocks_cached = 0;  // free but holding reusable prefixes
  // The sliding layers' window pool (0 without one: docs/server.md "Sliding-window memory").
  int32_t kv_window_blocks_total = 0;
  int32_t kv_window_blocks_used = 0;
  int32_t kv_window_blocks_cached = 0;
  uint64_t prefix_hit_blocks = 0;
  uint64_t prefix_query_blocks = 0;
  uint64_t prefix_hit_partial_tokens = 0;  // positions copied from cached blocks shared only partly
  uint64_t preemptions = 0;
  uint64_t steps = 0;
  uint64_t overlapped_steps = 0;        // decode steps queued before the host had their tokens
  uint64_t prompt_tokens_computed = 0;  // prefill rows actually run
  uint64_t generated_tokens = 0;
  uint64_t requests_finished = 0;
  // Speculative decoding: sequence-steps that verified drafts, drafts
  // proposed in them, drafts the model accepted.
  uint64_t spec_verify_steps = 0;
  uint64_t spec_draft_tokens = 0;
  uint64_t spec_accepted_tokens = 0;
  // Hybrid models' prefix cache (engine/state_snapshots.h): snapshot slots,
  // those holding a snapshot, snapshots taken, prompts started from one,
  // snapshots replaced (LRU) and freed with their block.
  int32_t state_snapshot_slots = 0;
  int32_t state_snapshots_kept = 0;
  uint64_t state_snapshots_saved = 0;
  uint64_t state_snapshots_restored = 0;
  uint64_t state_snapshots_replaced = 0;
  uint64_t state_snapshots_dropped = 0;
};

class Engine {
 public:
  // Builds the engine around a model and tokenizer (real or fake) and starts
  // the engine thread.
  // With a `proposer` and options.speculative_tokens > 0 it speculates with
  // that proposer; without one, prompt lookup does.
  Engine(std::unique_ptr<ModelRunner> runner, std::unique_ptr<TextCodec> codec, SchedulerOptions options = {},
         std::unique_ptr<DraftProposer> proposer = nullptr);
  // Loads a GGUF / safetensors model and its tokenizer.
  static std::unique_ptr<Engine> load(const EngineOptions& options);
  // Around an already loaded model (e.g. one with a merged adapter);
  // options.model_path and options.device are not used.
  static std::unique_ptr<Engine> from_model(std::shared_ptr<model::Model> model, const EngineOptions& options);
  ~Engine();  // cancels everything in flight and joins the engine thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Invalid requests (empty prompt, prompt >= context, n < 1)
  // get a handle whose only event is a FinishReason::Error.
  std::shared_ptr<RequestHandle> submit(GenerationRequest request);
  // The requests arrive together: the engine's next step sees every valid
  // one (submitted one by one, the engine thread may start on the first
  // while the rest arrive, and the batch's sequences begin at different
  // steps). Handles in the requests' order; invalid ones as in submit().
  std::vector<std::shared_ptr<RequestHandle>> submit_all(std::vector<GenerationRequest> requests);
  void cancel(uint64_t request_id);
  // Blocking helper: submits and calls on_event for every event until done.
  // Returns the final (done) event.
  GenerationEvent generate(GenerationRequest request, const std::function<void(const GenerationEvent&)>& on_event);

  // Stops taking work, cancels in-flight requests and joins the thread.
  void shutdown();

  std::vector<int32_t> tokenize(std::string_view text, const TextEncoding& encoding = {}) const {
    return codec_->encode(text, encoding);
  }
  const TextCodec& codec() const { return *codec_; }
  int32_t context_length() const { return context_length_; }
  int32_t vocab_size() const { return vocab_size_; }
  // Model extras for the server (chat template, tokenizer); null for fakes.
  const std::shared_ptr<model::Model>& model() const { return model_; }
  const std::shared_ptr<const tokenizer::Tokenizer>& tokenizer() const { return tokenizer_; }
  EngineStats stats() const;

 private:
  class Scheduler;
  void thread_main();

  std::shared_ptr<model::Model> model_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<TextCodec> codec_;
  std::unique_ptr<Scheduler> scheduler_;
  int32_t context_length_ = 0;
  int32_t vocab_size_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::pair<std::shared_ptr<RequestHandle>, GenerationRequest>> inbox_;
  std::unordered_map<uint64_t, std::weak_ptr<RequestHandle>> live_;  // for cancel(id)
  EngineStats snapshot_;                                             // scheduler stats after the last step
  bool stopping_ = false;
  std::atomic<uint64_t> next_id_{1};
  std::thread thread_;
};

}  // namespace brioche::engine
