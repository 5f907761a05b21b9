#include "engine/engine.h"

#include <optional>
#include <string>

#include "core/error.h"
#include "engine/draft_model_proposer.h"
#include "engine/model_tokenizer.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace brioche::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "error";
}

// ---- RequestHandle ---------------------------------------------------------

void RequestHandle::push(GenerationEvent event) {
  {
    std::lock_guard lock(mutex_);
    if (event.done) finished_.store(true);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

std::optional<GenerationEvent> RequestHandle::next() {
  std::unique_lock lock(mutex_);
  if (taken_done_) return std::nullopt;
  ready_.wait(lock, [&] { return !events_.empty(); });
  GenerationEvent event = std::move(events_.front());
  events_.pop_front();
  if (event.done) taken_done_ = true;
  return event;
}

std::optional<GenerationEvent> RequestHandle::next_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (taken_done_) return std::nullopt;
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  GenerationEvent event = std::move(events_.front());
  events_.pop_front();
  if (event.done) taken_done_ = true;
  return event;
}

std::vector<GenerationEvent> RequestHandle::drain() {
  std::lock_guard lock(mutex_);
  std::vector<GenerationEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  for (const GenerationEvent& e : out)
    if (e.done) taken_done_ = true;
  return out;
}

// ---- Engine ------------------------------------------------------------------

Engine::Engine(std::unique_ptr<ModelRunner> runner, std::unique_ptr<TextCodec> codec, SchedulerOptions options,
               std::unique_ptr<DraftProposer> proposer)
    : codec_(std::move(codec)) {
  BRIOCHE_CHECK(runner && codec_, "Engine: expected a model runner and a text codec");
  context_length_ = runner->context_length();
  vocab_size_ = runner->vocab_size();
  scheduler_ = std::make_unique<Scheduler>(std::move(runner), *codec_, options, std::move(proposer));
  snapshot_ = scheduler_->stats();
  thread_ = std::thread([this] { thread_main(); });
}

std::unique_ptr<Engine> Engine::load(const EngineOptions& options) {
  return from_model(
      model::Model::load(options.model_path, {.max_context = options.kv.max_context, .device = options.device}),
      options);
}

namespace {

// A draft model must speak the target's tokens: the same vocabulary size
// and the same bytes for every token (else its drafts are noise: never
// wrong, since the target verifies, but never accepted either).
void check_draft_vocabulary(const model::Model& target, const tokenizer::Tokenizer& target_tokenizer,
                            const model::Model& draft) {
  const int32_t target_vocab = target.config().vocab_size, draft_vocab = draft.config().vocab_size;
  if (draft_vocab != target_vocab)
    throw Error(error_message("--draft-model: its vocabulary has ", draft_vocab, " tokens but the model's has ",
                              target_vocab, ": a draft model must share the model's tokenizer"));
  std::unique_ptr<tokenizer::Tokenizer> draft_tokenizer = load_model_tokenizer(draft);
  if (draft_tokenizer->vocab_size() != target_tokenizer.vocab_size())
    throw Error(error_message("--draft-model: its tokenizer has ", draft_tokenizer->vocab_size(),
                              " tokens but the model's has ", target_tokenizer.vocab_size()));
  for (int32_t id = 0; id < target_tokenizer.vocab_size(); ++id)
    if (draft_tokenizer->token_bytes(id) != target_tokenizer.token_bytes(id))
      throw Error(error_message("--draft-model: token ", id, " is '", draft_tokenizer->token_bytes(id),
                                "' in its tokenizer but '", target_tokenizer.token_bytes(id),
                                "' in the model's: a draft model must share the model's tokenizer"));
  if (draft.device() != target.device()) throw Error("--draft-model: expected the draft on the model's device");
  if (draft.config().has_sequence_state())
    throw Error(
        "--draft-model: a hybrid draft model (linear-attention layers with a recurrent state) is not supported: "
        "its proposer keeps no state slots; use a Llama-family draft or prompt lookup");
}

}  // namespace

std::unique_ptr<Engine> Engine::from_model(std::shared_ptr<model::Model> model, const EngineOptions& options) {
  std::shared_ptr<const tokenizer::Tokenizer> tok = load_model_tokenizer(*model);
  std::unique_ptr<ModelRunner> runner;
  std::unique_ptr<DraftProposer> proposer;
  if (options.draft_model && options.scheduler.speculative_tokens > 0) {
    const model::Model& draft = *options.draft_model;
    check_draft_vocabulary(*model, *tok, draft);
    // One budget for both caches, split so that they hold the same number
    // of positions: the draft keeps every running sequence's K/V as the
    // target does (bytes per position: sum over layers of K and V).
    KvSizing target_kv = options.kv, draft_kv = options.kv;
    target_kv.window_sequences = options.scheduler.max_running;
    target_kv.window_step_rows = options.scheduler.max_batch_tokens;
    draft_kv.window_blocks = 0;  // the proposer keeps one table per sequence
    if (target_kv.n_blocks <= 0) {
      const size_t budget = kv_budget_bytes(options.kv, model->device());
      const double target_block =
          double(model::KvCache::block_bytes(model->config(), options.kv.block_size, options.kv.dtype));
      const double draft_block =
          double(model::KvCache::block_bytes(draft.config(), options.kv.block_size, options.kv.dtype));
      target_kv.kv_memory_bytes = size_t(double(budget) * target_block / (target_block + draft_block));
    }
    runner = make_model_runner(model, target_kv);
    draft_kv.n_blocks = runner->kv_block_count();
    draft_kv.max_context = runner->context_length();
    proposer = std::make_unique<DraftModelProposer>(make_model_runner(options.draft_model, draft_kv),
                                                    double(draft.weight_bytes()) / double(model->weight_bytes()));
  } else {
    KvSizing kv = options.kv;
    kv.window_sequences = options.scheduler.max_running;  // what the window pool is sized for
    kv.window_step_rows = options.scheduler.max_batch_tokens;
    // Hybrid models' snapshot slots serve the prefix cache and speculation
    // (the state before the drafts).
    if (!options.scheduler.prefix_cache && options.scheduler.speculative_tokens == 0) kv.state_snapshots = 0;
    runner = make_model_runner(model, kv);
  }
  auto engine =
      std::make_unique<Engine>(std::move(runner), make_text_codec(tok), options.scheduler, std::move(proposer));
  engine->model_ = std::move(model);
  engine->tokenizer_ = std::move(tok);
  return engine;
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

namespace {

// Why the engine cannot take `request`, or nothing when it can.
std::optional<std::string> invalid_request(const GenerationRequest& request, int32_t context_length,
                                           int32_t vocab_size) {
  if (request.prompt_tokens.empty()) return "the prompt is empty: expected at least one token";
  if (int32_t(request.prompt_tokens.size()) >= context_length)
    return error_message("the prompt has ", request.prompt_tokens.size(), " tokens but the context holds ",
                         context_length, " (prompt + at least one generated token)");
  for (int32_t t : request.prompt_tokens)
    if (t < 0 || t >= vocab_size)
      return error_message("prompt token ", t, " is outside the vocabulary [0, ", vocab_size, ")");
  if (request.n < 1 || request.n > 128) return error_message("n must be in [1, 128], got ", request.n);
  if (request.max_tokens < 0 || (request.max_tokens == 0 && !request.prompt_logprobs))
    return error_message("max_tokens must be at least 1 (0 only to score the prompt with prompt_logprobs), got ",
                         request.max_tokens);
  if (request.prompt_logprobs && request.top_logprobs < 0)
    return "prompt_logprobs needs top_logprobs >= 0 (the number of alternatives per token)";
  if (request.top_logprobs > 20) return error_message("top_logprobs must be in [0, 20], got ", request.top_logprobs);
  // The sampler's own checks (logit_bias ids, ranges), run here on the
  // caller's thread: a request the engine thread could not take must never
  // reach it.
  try {
    Sampler probe(request.sampling, vocab_size);
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// Ends `handle` with the one error event of a request the engine did not take.
void reject(RequestHandle& handle, const GenerationRequest& request, std::string message) {
  GenerationEvent event;
  event.finish = FinishReason::Error;
  event.error = std::move(message);
  event.done = true;
  event.usage.prompt_tokens = int32_t(request.prompt_tokens.size());
  handle.push(std::move(event));
  if (request.on_events) request.on_events();
}

}  // namespace

std::shared_ptr<RequestHandle> Engine::submit(GenerationRequest request) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(request));
  return submit_all(std::move(one))[0];
}

std::vector<std::shared_ptr<RequestHandle>> Engine::submit_all(std::vector<GenerationRequest> requests) {
  std::vector<std::shared_ptr<RequestHandle>> handles;
  std::vector<bool> valid;
  for (const GenerationRequest& request : requests) {
    handles.push_back(std::make_shared<RequestHandle>(next_id_.fetch_add(1)));
    std::optional<std::string> why = invalid_request(request, context_length_, vocab_size_);
    if (why) reject(*handles.back(), request, std::move(*why));
    valid.push_back(!why);
  }
  bool stopping;
  {
    std::lock_guard lock(mutex_);
    stopping = stopping_;
    for (size_t i = 0; i < requests.size() && !stopping; ++i) {
      if (!valid[i]) continue;
      live_[handles[i]->id()] = handles[i];
      inbox_.emplace_back(handles[i], std::move(requests[i]));
    }
  }
  if (stopping) {
    for (size_t i = 0; i < requests.size(); ++i)
      if (valid[i]) reject(*handles[i], requests[i], "the engine is shutting down");
    return handles;
  }
  wake_.notify_all();
  return handles;
}

void Engine::cancel(uint64_t request_id) {
  std::shared_ptr<RequestHandle> handle;
  {
    std::lock_guard lock(mutex_);
    auto it = live_.find(request_id);
    if (it != live_.end()) handle = it->second.lock();
  }
  if (handle) {
    handle->cancel();
    wake_.notify_all();
  }
}

GenerationEvent Engine::generate(GenerationRequest request,
                                 const std::function<void(const GenerationEvent&)>& on_event) {
  std::shared_ptr<RequestHandle> handle = submit(std::move(request));
  GenerationEvent last;
  while (std::optional<GenerationEvent> event = handle->next()) {
    if (on_event) on_event(*event);
    last = std::move(*event);
  }
  return last;
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mutex_);
  EngineStats s = snapshot_;
  for (const auto& [handle, request] : inbox_) s.waiting += request.n;
  return s;
}

void Engine::thread_main() {
  for (;;) {
    std::vector<std::pair<std::shared_ptr<RequestHandle>, GenerationRequest>> arrivals;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !inbox_.empty() || scheduler_->has_work(); });
      if (stopping_) break;
      arrivals.swap(inbox_);
    }
    for (auto& [handle, request] : arrivals) {
      // submit_all validated the request; a failure here is still one
      // request's, never the process's.
      std::function<void()> notify = request.on_events;
      size_t n_prompt = request.prompt_tokens.size();
      try {
        scheduler_->add(handle, std::move(request));
      } catch (const std::exception& e) {
        GenerationRequest failed{.on_events = std::move(notify)};
        failed.prompt_tokens.resize(n_prompt);
        reject(*handle, failed, error_message("the request could not be scheduled: ", e.what()));
      }
    }
    try {
      scheduler_->step();
    } catch (const std::exception& e) {
      // A step that throws leaves no consistent batch to continue: end the
      // requests it held with the error and keep serving new ones.
      scheduler_->finish_all(FinishReason::Error, error_message("the engine step failed: ", e.what()));
    }
    EngineStats s = scheduler_->stats();
    std::lock_guard lock(mutex_);
    snapshot_ = s;
    // Forget handles whose requests are over.
    for (auto it = live_.begin(); it != live_.end();) {
      auto h = it->second.lock();
      it = (!h || h->finished()) ? live_.erase(it) : std::next(it);
    }
  }
  // Shutdown: everything still queued or running is cancelled.
  std::vector<std::pair<std::shared_ptr<RequestHandle>, GenerationRequest>> arrivals;
  {
    std::lock_guard lock(mutex_);
    arrivals.swap(inbox_);
  }
  for (auto& [handle, request] : arrivals) scheduler_->add(std::move(handle), std::move(request));
  scheduler_->finish_all(FinishReason::Cancelled, "the engine shut down");
  std::lock_guard lock(mutex_);
  snapshot_ = scheduler_->stats();
  live_.clear();
}

}  // namespace brioche::engine
