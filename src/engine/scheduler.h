// The engine thread's state: sequences, KV block tables and the step loop.
//
// Only the engine thread touches a Scheduler. A request with n choices
// becomes n sequences; a sequence's `tokens` are its prompt followed by what
// it generated, and `n_computed` counts the leading tokens whose K/V are in
// the cache. Rows to run are always tokens[n_computed, n_computed + chunk):
// a decode is simply a chunk of one. Logits are wanted when the chunk reaches
// the last token, and the sampled token is appended.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/block_allocator.h"
#include "engine/constraint.h"
#include "engine/device_sampler.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/proposer.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/speculation_length.h"
#include "engine/state_snapshots.h"
#include "engine/stop.h"

namespace brioche::engine {

struct RequestState {
  std::shared_ptr<RequestHandle> handle;
  GenerationRequest request;
  int32_t open_choices = 0;
  bool prompt_ready = false;  // choice 0 computed the whole prompt: forks may start
  Usage usage;
};

struct Sequence {
  std::shared_ptr<RequestState> request;
  int32_t choice = 0;
  uint64_t order = 0;           // arrival order; preemption takes the newest
  std::vector<int32_t> tokens;  // prompt + generated
  int32_t n_prompt = 0;
  int32_t n_computed = 0;
  std::vector<int32_t> block_table;  // KV blocks covering positions [0, n_computed + pending)
  // The window pool's table (sliding layers, ModelRunner::kv_window_block_count
  // > 0): as long as block_table; entries before window_live are -1, given
  // back once no later row's window reaches them (free_out_of_window).
  std::vector<int32_t> window_table;
  int32_t window_live = 0;
  // Chained hashes of the token blocks, extended on demand (scheduler.cpp
  // block_hash): a block's hash depends only on the tokens up to its end, so
  // it is computed once however often the prompt is matched.
  std::vector<BlockHash> token_hashes;
  // The chain's start: 0 for the base model, the adapter's id otherwise, so
  // K/V computed with one adapter is never reused by another.
  BlockHash prefix_seed = 0;
  int32_t registered_blocks = 0;  // full computed blocks offered to the prefix cache
  // Hybrid models: the state snapshot match_prefix found for its reused
  // blocks, copied into its state slot when it is admitted; -1: none.
  int32_t state_snapshot = -1;
  int32_t n_generated = 0;
  bool ever_admitted = false;
  // GenerationRequest::prompt_logprobs, choice 0: the logprobs of prompt
  // tokens 1..prompt_scored, sent with the first event.
  bool scores_prompt = false;
  int32_t prompt_scored = 0;
  std::vector<TokenLogprob> prompt_logprobs;
  // Whether the row at position `pos` must give logits for a prompt logprob.
  bool scores_position(int32_t pos) const { return scores_prompt && pos + 1 < n_prompt && pos >= prompt_scored; }
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<TextStream> text;
  std::unique_ptr<StopMatcher> stop;
  // Grammar state; lives with the sequence, so a preempted sequence resumes
  // (recomputing its K/V) with the matcher exactly where its tokens left it.
  std::unique_ptr<SequenceConstraint> constraint;
  // Its penalty entries for device sampling, extended by each step's new
  // tokens (unused on the host path).
  DeviceSampler::PenaltyEntries penalties;
  // This step's draft tokens (speculative decoding): run as rows after the
  // decode row, their K/V written past n_computed until verified.
  std::vector<int32_t> drafts;
  // q of each draft ([drafts * vocab]) when a draft model drew them; empty
  // for point-mass drafts (prompt lookup, greedy).
  std::vector<float> draft_probs;
  SpeculationLength speculation;  // how many drafts to ask for next

  // Its recurrent-state slot while running (hybrid models); -1 otherwise.
  int32_t state_slot = -1;
  // Hybrid models: positions off the delta rule's chunk grid where a
  // forward of its rows ended (its prompt's end, each decode step), in
  // order. Its state depends on where its rows were cut, so a recompute
  // (after preemption) cuts them there again (SequenceView::state_splits)
  // and resumes with bit-identical state; and its blocks and snapshots
  // serve the prefix cache only up to the first (below it they hold what
  // any prompt with those tokens computes). Kept across preemption.
  std::vector<int32_t> state_splits;
  // This step's state snapshots (hybrid prefix cache): taken inside its
  // rows at block boundaries, published under the blocks' hashes once the
  // forward has run (Scheduler::plan_snapshots).
  std::vector<ops::StateCheckpoint> checkpoints;
  // Speculation on a hybrid model: the state before this step's drafts,
  // copied into a scratch slot of the snapshot pool (slot -1: none), and
  // the cuts that run each draft row as a decode step.
  ops::StateCheckpoint rollback{.position = 0, .slot = -1};
  std::vector<int32_t> draft_splits;
  // Hybrid, after a rejection: its state was rolled back to before the
  // drafts and its next rows are accepted drafts and the model's token,
  // run as a decode (with new drafts) rather than as a prefill chunk.
  bool catching_up = false;

  int32_t remaining() const { return int32_t(tokens.size()) - n_computed; }
};

class Engine::Scheduler {
 public:
  Scheduler(std::unique_ptr<ModelRunner> runner, const TextCodec& codec, SchedulerOptions options,
            std::unique_ptr<DraftProposer> proposer = nullptr);

  void add(std::shared_ptr<RequestHandle> handle, GenerationRequest request);
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  // One scheduling + forward + sampling round.
  void step();
  // Finishes every sequence with `reason` (shutdown).
  void finish_all(FinishReason reason, const std::string& message);
  EngineStats stats() const;

  int32_t context_length() const { return runner_->context_length(); }
  int32_t vocab_size() const { return runner_->vocab_size(); }

 private:
  struct Planned {
    Sequence* seq;
    int32_t chunk;
  };

  void drop_cancelled();
  std::vector<Planned> plan();
  void group_by_adapter(std::vector<Planned>& planned);
  // Grows the block table so positions [0, n_positions) are covered; false if short of blocks.
  bool ensure_blocks(Sequence& seq, int32_t n_positions);
  // Largest chunk (<= wanted) whose positions fit in held + available blocks.
  int32_t fit_chunk(const Sequence& seq, int32_t wanted) const;
  void match_prefix(Sequence& seq);
  void register_full_blocks(Sequence& seq);
  void release_blocks(Sequence& seq);
  // Gives back seq's window-pool blocks that every row from n_computed on
  // reads past (positions < n_computed - window + 1).
  void free_out_of_window(Sequence& seq);
  // Among prefixes of the first `matched` blocks, the longest whose sliding
  // layers' K/V is cached too (the window before its end, in the window
  // pool's prefix cache); takes those blocks into seq.window_table.
  int32_t match_window_prefix(Sequence& seq, int32_t matched);
  void preempt(Sequence* seq);
  // Runs `planned` (its forward already queued when `forward_queued`: a step
  // run ahead), samples the rows that reached their last token and accepts
  // their tokens.
  void run(const std::vector<Planned>& planned, bool forward_queued);
  void queue_forward(const std::vector<Planned>& planned);
  // With the device sampler's launch in flight: queues the next decode step
  // of `sampled` (this step's sampled sequences, plan order) fed by the
  // sampler's ids on the device, when that is the step plan() would make.
  void run_ahead(const std::vector<Sequence*>& sampled);
  // Sets seq.drafts (speculative decoding) of the planned decode rows
  // within the step's row budget and the blocks free now; one proposer call
  // for all of them.
  void propose_drafts(const std::vector<Planned>& planned, int32_t& budget);
  // Verdicts on seq.drafts from rows [first_row, first_row + 1 + drafts) of
  // `logits` (host f32): accepts the agreed prefix and the model's own next
  // token, and gives back the K/V (and blocks) of the rejected positions.
  void verify_drafts(Sequence& seq, const Tensor& logits, int32_t first_row);
  // With the device sampler: copies the verify rows of `to_verify` (each
  // sequence's 1 + drafts rows from its first logits row) into
  // verify_logits_, and returns each sequence's first row there.
  std::vector<int32_t> host_verify_logits(const std::vector<std::pair<Sequence*, int32_t>>& to_verify);
  void accept_token(Sequence& seq, const Sampler::Result& sampled);
  // Appends one generated token (sampled, or forced by jump-forward when
  // `sampled` is null), emits its text; false when the sequence finished.
  bool append_token(Sequence& seq, int32_t token, const Sampler::Result* sampled);
  // Records log p(tokens[pos + 1]) from `logits` (one row, vocab wide).
  void score_prompt_position(Sequence& seq, int32_t pos, std::span<const float> logits);
  void finish(Sequence* seq, FinishReason reason, const std::string& error = {});
  void finish(Sequence* seq, GenerationEvent event);  // event.finish set by the caller
  void remove(Sequence* seq);
  Sequence* newest_running(const std::vector<Planned>& planned) const;

  std::unique_ptr<ModelRunner> runner_;
  const TextCodec& codec_;
  SchedulerOptions options_;
  BlockAllocator blocks_;
  // The sliding layers' pool (null without one) and their window.
  std::unique_ptr<BlockAllocator> window_blocks_;
  int32_t window_ = 0;
  std::vector<int32_t> eos_ids_;
  std::vector<std::unique_ptr<Sequence>> running_;  // oldest first
  std::deque<std::unique_ptr<Sequence>> waiting_;   // admission order
  uint64_t next_order_ = 0;
  Tensor logits_;                                  // on the device when device_sampler_ is set
  std::unique_ptr<DeviceSampler> device_sampler_;  // CUDA model and BRIOCHE_CUDA_SAMPLING != 0
  Tensor verify_logits_;                           // host copies of verify rows (device sampler + speculation)
  model::ForwardBatch batch_;
  // A decode step queued before the host had its tokens (run_ahead): its
  // rows; remove() drops the rows of sequences that finish meanwhile.
  std::optional<std::vector<Planned>> ahead_;
  bool run_ahead_enabled_ = false;  // device sampler and BRIOCHE_RUN_AHEAD != 0
  uint64_t overlapped_steps_ = 0;
  uint64_t preemptions_ = 0, steps_ = 0, prompt_rows_ = 0, generated_ = 0, finished_requests_ = 0;
  uint64_t partial_hit_tokens_ = 0;        // prompt positions copied from partly shared blocks
  std::vector<int32_t> free_state_slots_;  // hybrid models: slots no running sequence holds
  // Hybrid models: prefill splits fall on multiples of state_chunk_ (the
  // model's results then do not depend on them), and the prefix cache
  // reuses blocks only up to a kept state snapshot (null without it).
  int32_t state_chunk_ = 1;
  int32_t snapshot_alignment_ = 0;  // lcm(block size, state_chunk_): where snapshots are taken
  std::unique_ptr<StateSnapshots> snapshots_;
  // Hybrid models: where seq's blocks and state stop being what any prompt
  // with its tokens computes (its first state split; INT32_MAX: nowhere).
  int32_t canonical_end(const Sequence& seq) const;
  // A prefill chunk of a hybrid sequence, cut to end on the delta rule's
  // chunk grid or at one of its state splits (unless it reaches the end).
  int32_t align_chunk(const Sequence& seq, int32_t chunk) const;
  // Records a forward's end at `position` in seq.state_splits (hybrid
  // models; positions on the chunk grid need no record).
  void add_state_split(Sequence& seq, int32_t position);
  // Reserves snapshot slots for the block boundaries seq's next `chunk`
  // rows cross (within its canonical prefix, where none is kept yet).
  void plan_snapshots(Sequence& seq, int32_t chunk);
  // After the forward: publishes seq's checkpoints whose blocks are cached.
  void publish_snapshots(Sequence& seq);
  std::unique_ptr<DraftProposer> proposer_;  // null: no speculation
  SpeculationCosts spec_costs_;
  uint64_t spec_verify_steps_ = 0, spec_draft_tokens_ = 0, spec_accepted_tokens_ = 0;
};

}  // namespace brioche::engine
