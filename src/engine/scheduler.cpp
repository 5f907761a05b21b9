#include "engine/scheduler.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <exception>
#include <numeric>

#include "core/env_switch.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/logprobs.h"
#include "ops/device.h"

namespace brioche::engine {

Engine::Scheduler::Scheduler(std::unique_ptr<ModelRunner> runner, const TextCodec& codec, SchedulerOptions options,
                             std::unique_ptr<DraftProposer> proposer)
    : runner_(std::move(runner)),
      codec_(codec),
      options_(options),
      blocks_(runner_->kv_block_count(), runner_->kv_block_size()),
      eos_ids_(codec.eos_ids()) {
  if (runner_->kv_window_block_count() > 0) {
    window_blocks_ = std::make_unique<BlockAllocator>(runner_->kv_window_block_count(), runner_->kv_block_size());
    window_ = runner_->kv_window();
  }
  // Hybrid models keep a recurrent state per running sequence, in a slot:
  // at most one running sequence per slot; the prefix cache reuses blocks
  // only up to a state snapshot (a cached block's K/V says nothing of the
  // recurrent state at its end: docs/server.md); speculation rolls
  // rejected drafts out of the state by a snapshot taken before them
  // (verify_drafts), in a slot of the same pool.
  if (const int32_t slots = runner_->state_slot_count(); slots > 0) {
    if (options_.speculative_tokens > 0 && runner_->state_snapshot_count() == 0)
      throw Error(
          "speculative decoding of a hybrid model needs state snapshot slots (--state-snapshots, KvSizing::"
          "state_snapshots > 0) to roll rejected drafts out of its recurrent state: run without --speculative, or "
          "with snapshot slots");
    options_.max_running = std::min(options_.max_running, slots);
    for (int32_t s = slots - 1; s >= 0; --s) free_state_slots_.push_back(s);
    state_chunk_ = std::max(runner_->state_chunk(), 1);
    snapshot_alignment_ = std::lcm(blocks_.block_size(), state_chunk_);
    if (runner_->state_snapshot_count() > 0) {
      snapshots_ = std::make_unique<StateSnapshots>(*runner_);
      // A snapshot is of no use without its block: it goes with it.
      blocks_.on_evict([snapshots = snapshots_.get()](BlockHash hash) { snapshots->drop(hash); });
    } else {
      options_.prefix_cache = false;
    }
  }
  BRIOCHE_CHECK(options_.max_batch_tokens > 0 && options_.max_running > 0,
                "SchedulerOptions: expected positive max_batch_tokens and max_running, got ", options_.max_batch_tokens,
                " and ", options_.max_running);
  if (runner_->device() == Device::CUDA && DeviceSampler::enabled_by_environment()) {
    device_sampler_ = std::make_unique<DeviceSampler>(runner_->vocab_size());
    logits_ = ops::zeros(DType::F32, {1, runner_->vocab_size()}, Device::CUDA);  // the model keeps it there
    run_ahead_enabled_ = env_switch_on("BRIOCHE_RUN_AHEAD");
  }
  // Drafts are verified on the host, from host logits: with the device
  // sampler, the verify rows' logits are copied back (run()) and the other
  // rows stay on the device.
  if (options_.speculative_tokens > 0) {
    proposer_ = proposer ? std::move(proposer)
                         : std::make_unique<PromptLookupProposer>(options_.speculative_min_ngram,
                                                                  options_.speculative_max_ngram);
    spec_costs_ = {.row = options_.speculative_row_cost, .draft = proposer_->cost_per_draft()};
  }
}

void Engine::Scheduler::add(std::shared_ptr<RequestHandle> handle, GenerationRequest request) {
  auto state = std::make_shared<RequestState>();
  state->handle = std::move(handle);
  state->request = std::move(request);
  const GenerationRequest& req = state->request;
  state->open_choices = req.n;
  state->usage.prompt_tokens = int32_t(req.prompt_tokens.size());
  for (int32_t choice = 0; choice < req.n; ++choice) {
    auto seq = std::make_unique<Sequence>();
    seq->request = state;
    seq->choice = choice;
    seq->order = next_order_++;
    seq->tokens = req.prompt_tokens;
    seq->n_prompt = int32_t(req.prompt_tokens.size());
    seq->prefix_seed = req.adapter ? req.adapter->id : 0;
    seq->scores_prompt = req.prompt_logprobs && choice == 0;
    SamplingParams params = req.sampling;
    // Forks of a seeded request get distinct but reproducible streams.
    if (params.seed && choice > 0) params.seed = *params.seed + uint64_t(choice);
    params.logprobs = req.top_logprobs >= 0;
    params.top_logprobs = std::max(0, req.top_logprobs);
    seq->sampler = std::make_unique<Sampler>(std::move(params), runner_->vocab_size());
    seq->text = codec_.new_stream();
    seq->stop = std::make_unique<StopMatcher>(req.stop);
    if (req.constraint.compiled) seq->constraint = std::make_unique<SequenceConstraint>(req.constraint);
    waiting_.push_back(std::move(seq));
  }
}

void Engine::Scheduler::step() {
  drop_cancelled();
  // A step queued ahead last time has its forward on the device already
  // (dropped when every row's sequence has finished since).
  std::vector<Planned> planned;
  if (ahead_) planned = std::move(*ahead_);
  ahead_.reset();
  const bool forward_queued = !planned.empty();
  if (!forward_queued) planned = plan();
  if (planned.empty()) {
    if (!running_.empty()) {
      // Every running sequence is stuck waiting for blocks held by the others
      // (long prefills): make room by recomputing the newest later.
      preempt(newest_running({}));
    } else if (!waiting_.empty()) {
      Sequence* head = waiting_.front().get();
      if (head->choice == 0 || head->request->prompt_ready) {
        finish(
            head, FinishReason::Error,
            error_message("the prompt needs ", (head->tokens.size() + blocks_.block_size() - 1) / blocks_.block_size(),
                          " KV blocks but the cache has ", blocks_.total_blocks()));
      }
    }
    return;
  }
  ++steps_;
  try {
    run(planned, forward_queued);
  } catch (const std::exception& e) {
    std::string message = error_message("model step failed: ", e.what());
    for (const Planned& p : planned) {
      bool alive = std::any_of(running_.begin(), running_.end(), [&](const auto& s) { return s.get() == p.seq; });
      if (alive) finish(p.seq, FinishReason::Error, message);
    }
  }
}

void Engine::Scheduler::drop_cancelled() {
  std::vector<Sequence*> doomed;
  for (auto& seq : running_)
    if (seq->request->handle->cancel_requested()) doomed.push_back(seq.get());
  for (auto& seq : waiting_)
    if (seq->request->handle->cancel_requested()) doomed.push_back(seq.get());
  for (Sequence* seq : doomed) finish(seq, FinishReason::Cancelled);
}

bool Engine::Scheduler::ensure_blocks(Sequence& seq, int32_t n_positions) {
  int32_t bs = blocks_.block_size();
  int32_t need = (n_positions + bs - 1) / bs - int32_t(seq.block_table.size());
  if (need <= 0) return true;
  if (need > blocks_.available_blocks()) return false;
  if (window_blocks_ && need > window_blocks_->available_blocks()) return false;
  for (int32_t i = 0; i < need; ++i) seq.block_table.push_back(*blocks_.allocate());
  if (window_blocks_)
    for (int32_t i = 0; i < need; ++i) seq.window_table.push_back(*window_blocks_->allocate());
  return true;
}

int32_t Engine::Scheduler::fit_chunk(const Sequence& seq, int32_t wanted) const {
  int64_t capacity = int64_t(seq.block_table.size() + blocks_.available_blocks()) * blocks_.block_size();
  // The window pool: its table is as long, its blocks before window_live given back already.
  if (window_blocks_)
    capacity = std::min<int64_t>(
        capacity, int64_t(seq.window_table.size() + window_blocks_->available_blocks()) * blocks_.block_size());
  return int32_t(std::clamp<int64_t>(capacity - seq.n_computed, 0, wanted));
}

namespace {

// Chained hash of full token block b of seq (b < tokens / block_size), cached.
BlockHash block_hash(Sequence& seq, size_t b, int32_t block_size) {
  while (seq.token_hashes.size() <= b) {
    const size_t i = seq.token_hashes.size();
    const BlockHash parent = i == 0 ? seq.prefix_seed : seq.token_hashes[i - 1];
    const std::span<const int32_t> block_tokens(seq.tokens.data() + i * size_t(block_size), size_t(block_size));
    seq.token_hashes.push_back(chain_block_hash(parent, block_tokens));
  }
  return seq.token_hashes[b];
}

}  // namespace

void Engine::Scheduler::match_prefix(Sequence& seq) {
  if (!options_.prefix_cache || seq.n_computed != 0 || !seq.block_table.empty()) return;
  if (seq.scores_prompt) return;  // every prompt row's logits are needed, and cached rows have none
  int32_t bs = blocks_.block_size();
  // Leave at least one token to run: its logits are needed.
  int32_t max_blocks = (int32_t(seq.tokens.size()) - 1) / bs;
  BlockHash parent = seq.prefix_seed;
  for (int32_t b = 0; b < max_blocks; ++b) {
    std::span<const int32_t> block_tokens(seq.tokens.data() + size_t(b) * bs, size_t(bs));
    BlockHash h = block_hash(seq, size_t(b), bs);
    std::optional<int32_t> hit = blocks_.lookup(h, block_tokens);
    if (!hit) break;
    seq.block_table.push_back(*hit);
    parent = h;
  }
  if (snapshots_) {
    // Hybrid: only as far as a kept state snapshot, the deepest one among
    // the matched blocks; no partial block (no state is kept inside one).
    // A preempted sequence's own state differs from the snapshots' past its
    // first state split: it recomputes from below it.
    int32_t keep = 0;
    for (int32_t b = int32_t(seq.block_table.size()); b > 0 && keep == 0; --b) {
      if (b * bs % snapshot_alignment_ != 0 || b * bs > canonical_end(seq)) continue;
      if (std::optional<int32_t> s = snapshots_->find(block_hash(seq, size_t(b - 1), bs))) {
        keep = b;
        seq.state_snapshot = *s;
      }
    }
    while (int32_t(seq.block_table.size()) > keep) {
      blocks_.release(seq.block_table.back());
      seq.block_table.pop_back();
    }
    seq.registered_blocks = keep;
    seq.n_computed = keep * bs;
    return;
  }
  if (window_blocks_) {
    // Sliding layers: as far as their window before the end is cached too;
    // no partial block (the runner copies main-pool blocks only).
    const int32_t keep = match_window_prefix(seq, int32_t(seq.block_table.size()));
    while (int32_t(seq.block_table.size()) > keep) {
      blocks_.release(seq.block_table.back());
      seq.block_table.pop_back();
    }
    seq.registered_blocks = keep;
    seq.n_computed = keep * bs;
    return;
  }
  seq.registered_blocks = int32_t(seq.block_table.size());  // already in the cache
  seq.n_computed = int32_t(seq.block_table.size()) * bs;
  // Below block granularity: a cached block with the same prefix whose first
  // t tokens equal the next ones of this prompt (requests with one system
  // prompt differ only after it, mid-block) gives those t positions' K/V by
  // copy into a fresh block of this sequence. Every row's K/V depends only
  // on its own prefix, so the copy is what the forward would compute.
  int32_t reusable = std::min(bs, int32_t(seq.tokens.size()) - 1 - seq.n_computed);
  if (reusable <= 0) return;
  std::optional<PartialBlockHit> partial =
      blocks_.lookup_partial(parent, std::span<const int32_t>(seq.tokens.data() + seq.n_computed, size_t(reusable)));
  if (!partial) return;
  std::optional<int32_t> fresh = blocks_.allocate();
  if (fresh && runner_->copy_kv_prefix(partial->block, *fresh, partial->n_tokens)) {
    seq.block_table.push_back(*fresh);
    seq.n_computed += partial->n_tokens;
    partial_hit_tokens_ += uint64_t(partial->n_tokens);
  } else if (fresh) {
    blocks_.release(*fresh);
  }
  blocks_.release(partial->block);
}

int32_t Engine::Scheduler::match_window_prefix(Sequence& seq, int32_t matched) {
  const int32_t bs = blocks_.block_size();
  for (int32_t m = matched; m > 0; --m) {
    // Rows from position m·bs on read the sliding layers' K/V from m·bs - window + 1.
    const int32_t first = std::max(0, m * bs - window_ + 1) / bs;
    bool cached = true;
    for (int32_t b = first; b < m && cached; ++b) cached = window_blocks_->is_cached(block_hash(seq, size_t(b), bs));
    if (!cached) continue;
    std::vector<int32_t> taken;
    for (int32_t b = first; b < m; ++b) {
      const std::span<const int32_t> block_tokens(seq.tokens.data() + size_t(b) * bs, size_t(bs));
      std::optional<int32_t> hit = window_blocks_->lookup(block_hash(seq, size_t(b), bs), block_tokens);
      if (!hit) break;  // a hash collision: not this prefix
      taken.push_back(*hit);
    }
    if (int32_t(taken.size()) != m - first) {
      for (int32_t block : taken) window_blocks_->release(block);
      continue;
    }
    seq.window_table.assign(size_t(first), -1);
    seq.window_table.insert(seq.window_table.end(), taken.begin(), taken.end());
    seq.window_live = first;
    return m;
  }
  return 0;
}

void Engine::Scheduler::free_out_of_window(Sequence& seq) {
  if (!window_blocks_) return;
  const int32_t bs = blocks_.block_size();
  // The next row (position n_computed) reads from n_computed - window + 1 on.
  const int32_t first_read = seq.n_computed - window_ + 1;
  for (; seq.window_live < int32_t(seq.window_table.size()) && (seq.window_live + 1) * bs <= first_read;
       ++seq.window_live) {
    int32_t& block = seq.window_table[size_t(seq.window_live)];
    if (block >= 0) window_blocks_->release(block);
    block = -1;
  }
}

void Engine::Scheduler::register_full_blocks(Sequence& seq) {
  int32_t bs = blocks_.block_size();
  int32_t full = seq.n_computed / bs;
  // Hybrid: blocks past the first state split hold K/V that only this
  // sequence's cuts give (canonical_end).
  const int64_t limit = state_chunk_ > 1 ? canonical_end(seq) : INT32_MAX;
  for (; seq.registered_blocks < full; ++seq.registered_blocks) {
    if (!options_.prefix_cache || int64_t(seq.registered_blocks + 1) * bs > limit) continue;
    const size_t b = size_t(seq.registered_blocks);
    std::span<const int32_t> block_tokens(seq.tokens.data() + b * size_t(bs), size_t(bs));
    const BlockHash parent = b == 0 ? seq.prefix_seed : block_hash(seq, b - 1, bs);
    blocks_.register_full_block(seq.block_table[b], parent, block_hash(seq, b, bs), block_tokens);
    // The sliding layers' K/V of the block, under the same hash, while it is still held.
    if (window_blocks_ && seq.window_table[b] >= 0)
      window_blocks_->register_full_block(seq.window_table[b], parent, block_hash(seq, b, bs), block_tokens);
  }
  free_out_of_window(seq);
}

void Engine::Scheduler::release_blocks(Sequence& seq) {
  // Tail first: the LRU then evicts a prefix's later blocks before its head,
  // which is the part other requests are most likely to share.
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) blocks_.release(*it);
  seq.block_table.clear();
  for (auto it = seq.window_table.rbegin(); it != seq.window_table.rend(); ++it)
    if (*it >= 0) window_blocks_->release(*it);
  seq.window_table.clear();
  seq.window_live = 0;
  seq.registered_blocks = 0;
  seq.n_computed = 0;
  // Its recurrent state goes with its K/V: a resumed sequence starts over
  // (its state_splits stay: the recompute cuts its rows there again).
  if (seq.state_slot >= 0) free_state_slots_.push_back(seq.state_slot);
  seq.state_slot = -1;
  seq.state_snapshot = -1;
  for (const ops::StateCheckpoint& cp : seq.checkpoints) snapshots_->release(cp.slot);
  seq.checkpoints.clear();
  if (seq.rollback.slot >= 0) snapshots_->release(seq.rollback.slot);
  seq.rollback.slot = -1;
  seq.catching_up = false;
}

void Engine::Scheduler::add_state_split(Sequence& seq, int32_t position) {
  if (state_chunk_ > 1 && position % state_chunk_ != 0 &&
      (seq.state_splits.empty() || position > seq.state_splits.back()))
    seq.state_splits.push_back(position);
}

int32_t Engine::Scheduler::canonical_end(const Sequence& seq) const {
  return seq.state_splits.empty() ? INT32_MAX : seq.state_splits.front();
}

int32_t Engine::Scheduler::align_chunk(const Sequence& seq, int32_t chunk) const {
  if (state_chunk_ <= 1 || chunk <= 0) return chunk;
  const int32_t start = seq.n_computed, end = start + chunk;
  if (end == int32_t(seq.tokens.size())) return chunk;
  // The last cut at or before `end`: the grid, or where an earlier forward
  // ended (a recompute replays those forwards' cuts).
  int32_t cut = end / state_chunk_ * state_chunk_;
  auto after = std::upper_bound(seq.state_splits.begin(), seq.state_splits.end(), end);
  if (after != seq.state_splits.begin()) cut = std::max(cut, *std::prev(after));
  if (cut > start) return cut - start;
  // Less budget (or blocks) than the grid needs: a chunk cut off the grid
  // would be a split that a solo run of this sequence does not make, so it
  // waits for a step with room, which comes while the oldest prefill takes
  // the budget first and decode rows leave a chunk's worth. Where they
  // never can, it runs cut off the grid (exact for itself, reused by no
  // other prompt) rather than never.
  return options_.max_batch_tokens - options_.max_running >= state_chunk_ ? 0 : chunk;
}

void Engine::Scheduler::plan_snapshots(Sequence& seq, int32_t chunk) {
  if (!snapshots_ || !options_.prefix_cache) return;
  const int32_t bs = blocks_.block_size();
  const int64_t last = std::min<int64_t>(seq.n_computed + chunk, canonical_end(seq));
  // Deepest first: with fewer free slots than boundaries, the ones that
  // save the most computing are kept (as the LRU keeps a prompt's later
  // boundaries over its earlier ones).
  for (int64_t b = last / snapshot_alignment_ * int64_t(snapshot_alignment_); b > seq.n_computed;
       b -= snapshot_alignment_) {
    const BlockHash hash = block_hash(seq, size_t(b / bs - 1), bs);
    if (snapshots_->contains(hash)) continue;  // kept already, or taken in this step by another sequence
    std::optional<int32_t> slot = snapshots_->reserve(hash);
    if (!slot) break;
    seq.checkpoints.insert(seq.checkpoints.begin(), {.position = int32_t(b), .slot = *slot});
  }
}

void Engine::Scheduler::publish_snapshots(Sequence& seq) {
  for (const ops::StateCheckpoint& cp : seq.checkpoints) {
    // Registered by register_full_blocks just before (or already cached).
    if (blocks_.is_cached(block_hash(seq, size_t(cp.position / blocks_.block_size() - 1), blocks_.block_size())))
      snapshots_->publish(cp.slot);
    else
      snapshots_->release(cp.slot);
  }
  seq.checkpoints.clear();
}

Sequence* Engine::Scheduler::newest_running(const std::vector<Planned>& planned) const {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    bool is_planned = std::any_of(planned.begin(), planned.end(), [&](const Planned& p) { return p.seq == it->get(); });
    if (!is_planned) return it->get();
  }
  return nullptr;
}

void Engine::Scheduler::preempt(Sequence* seq) {
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& s) { return s.get() == seq; });
  BRIOCHE_CHECK(it != running_.end(), "Scheduler::preempt: sequence is not running");
  release_blocks(*seq);
  if (proposer_) proposer_->evict(seq->order);
  ++preemptions_;
  // Back to the front of the queue: it resumes before newer arrivals, by
  // recomputing prompt + generated tokens (often straight from the prefix cache).
  waiting_.push_front(std::move(*it));
  running_.erase(it);
}

namespace {

// Hashes of the prompt blocks a chunk completes: they enter the prefix cache
// when this step's forward has written them.
void add_filled_block_hashes(Sequence& seq, int32_t chunk, int32_t block_size, std::vector<BlockHash>& out) {
  // (Hybrid: only blocks below the first state split enter the cache.)
  const int32_t end =
      seq.state_splits.empty() ? seq.n_computed + chunk : std::min(seq.n_computed + chunk, seq.state_splits.front());
  const size_t full_after = size_t(end) / size_t(block_size);
  for (size_t b = size_t(seq.registered_blocks); b < full_after; ++b) out.push_back(block_hash(seq, b, block_size));
}

// Whether a waiting sequence's prompt shares a full block with one that
// another sequence computes in this step. Such a sequence waits one step and
// then takes those blocks from the prefix cache, instead of computing the
// same K/V again: requests that arrive together with one system prompt
// compute it once.
bool shares_a_filling_block(Sequence& seq, int32_t block_size, const std::vector<BlockHash>& filling) {
  if (filling.empty() || seq.n_computed != 0) return false;
  const size_t max_blocks = (seq.tokens.size() - 1) / size_t(block_size);  // as match_prefix: one token left to run
  for (size_t b = 0; b < max_blocks; ++b) {
    if (std::find(filling.begin(), filling.end(), block_hash(seq, b, block_size)) != filling.end()) return true;
  }
  return false;
}

}  // namespace

std::vector<Engine::Scheduler::Planned> Engine::Scheduler::plan() {
  std::vector<Planned> planned;
  int32_t budget = options_.max_batch_tokens;
  int32_t decoding = 0, prefilling = 0;
  for (auto& seq : running_) {
    seq->drafts.clear();
    seq->draft_probs.clear();
    if (seq->remaining() == 1 || seq->catching_up) ++decoding;
    if (seq->remaining() > 1 && !seq->catching_up) ++prefilling;
  }
  // On CUDA a step with prefill rows does not speculate: they would take
  // its forward past the rows computed exactly as decodes (propose_drafts).
  const bool cuda_prefill = runner_->device() == Device::CUDA && (prefilling > 0 || !waiting_.empty());
  const bool speculate = proposer_ && decoding <= options_.speculative_max_batch && !cuda_prefill;

  // 1. One decode row for each running sequence, oldest first; preempt the
  // newest when blocks run out. A hybrid sequence catching up on accepted
  // drafts (verify_drafts) decodes its rows with them, so it may draft again.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i].get();
    const int32_t rows = seq->catching_up && seq->remaining() <= budget ? seq->remaining() : 1;
    if (seq->remaining() != rows) continue;
    bool have_blocks = ensure_blocks(*seq, seq->n_computed + rows);
    while (!have_blocks) {
      Sequence* victim = newest_running(planned);
      if (victim == seq && running_.size() == 1) {
        // Alone and still out of blocks: the cache cannot hold it any longer.
        finish(seq, FinishReason::Length);
        --i;
        break;
      }
      bool self = victim == seq;
      preempt(victim);
      if (self) {
        --i;
        break;
      }
      have_blocks = ensure_blocks(*seq, seq->n_computed + rows);
    }
    if (!have_blocks) continue;
    planned.push_back({seq, rows});
    budget -= rows;
  }
  // Drafts once every decode row has its block, so that they never cause a
  // preemption; they come before prefill in the budget.
  if (speculate) propose_drafts(planned, budget);

  // Prompt blocks this step's prefill chunks complete (see shares_a_filling_block).
  std::vector<BlockHash> filling;

  // 2. Prefill chunks of running sequences that are mid-prompt.
  for (auto& owned : running_) {
    if (budget <= 0) break;
    Sequence* seq = owned.get();
    if (seq->remaining() <= 1) continue;
    if (seq->catching_up && std::any_of(planned.begin(), planned.end(), [&](const Planned& p) { return p.seq == seq; }))
      continue;  // its rows run as a decode (1.)
    int32_t chunk = align_chunk(*seq, fit_chunk(*seq, std::min(seq->remaining(), budget)));
    if (chunk <= 0 || !ensure_blocks(*seq, seq->n_computed + chunk)) continue;
    plan_snapshots(*seq, chunk);
    planned.push_back({seq, chunk});
    budget -= chunk;
    if (options_.prefix_cache) add_filled_block_hashes(*seq, chunk, blocks_.block_size(), filling);
  }

  // 3. Admit waiting sequences in order while budget, blocks and slots last.
  for (auto it = waiting_.begin(); it != waiting_.end() && budget > 0;) {
    if (int32_t(running_.size()) >= options_.max_running) break;
    Sequence* seq = it->get();
    if (seq->choice > 0 && !seq->request->prompt_ready) {
      ++it;  // a fork waits until its parent's prompt blocks are cached
      continue;
    }
    if (options_.prefix_cache && shares_a_filling_block(*seq, blocks_.block_size(), filling)) {
      ++it;  // admitted next step, from the prefix cache
      continue;
    }
    match_prefix(*seq);
    int32_t chunk = align_chunk(*seq, fit_chunk(*seq, std::min(seq->remaining(), budget)));
    if (chunk <= 0 || !ensure_blocks(*seq, seq->n_computed + chunk)) {
      release_blocks(*seq);  // waiting sequences hold no blocks
      break;
    }
    if (options_.prefix_cache) add_filled_block_hashes(*seq, chunk, blocks_.block_size(), filling);
    if (!seq->ever_admitted && seq->choice == 0) seq->request->usage.cached_prompt_tokens = seq->n_computed;
    seq->ever_admitted = true;
    planned.push_back({seq, chunk});
    budget -= chunk;
    if (!free_state_slots_.empty()) {  // hybrid models (max_running <= slots, so there is one)
      seq->state_slot = free_state_slots_.back();
      free_state_slots_.pop_back();
      // Copied now, before plan_snapshots may hand its slot to a new snapshot.
      if (seq->state_snapshot >= 0) snapshots_->restore(seq->state_snapshot, seq->state_slot);
      seq->state_snapshot = -1;
      plan_snapshots(*seq, chunk);
    }
    running_.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
  // Keep running_ oldest first (preempted sequences come back with their old order).
  std::stable_sort(running_.begin(), running_.end(), [](const auto& a, const auto& b) { return a->order < b->order; });
  group_by_adapter(planned);
  return planned;
}

// Rows of one adapter next to each other: the forward applies each adapter
// once per run of its rows (model/blocks.h LayerLora), so a step over 8
// adapters costs 8 runs, not one per sequence. Groups keep the order of
// their first sequence, and sequences their order within a group.
void Engine::Scheduler::group_by_adapter(std::vector<Planned>& planned) {
  std::vector<const model::ServedAdapter*> order;
  for (const Planned& p : planned) {
    const model::ServedAdapter* a = p.seq->request->request.adapter.get();
    if (std::find(order.begin(), order.end(), a) == order.end()) order.push_back(a);
  }
  if (order.size() < 2) return;
  auto rank = [&](const Planned& p) {
    return std::find(order.begin(), order.end(), p.seq->request->request.adapter.get()) - order.begin();
  };
  std::stable_sort(planned.begin(), planned.end(),
                   [&](const Planned& a, const Planned& b) { return rank(a) < rank(b); });
}

void Engine::Scheduler::queue_forward(const std::vector<Planned>& planned) {
  model::ForwardBatch& batch = batch_;
  batch.tokens.clear();
  batch.positions.clear();
  batch.wants_logits.clear();
  batch.sequences.clear();
  for (const Planned& p : planned) {
    Sequence& seq = *p.seq;
    model::SequenceView view;
    view.first_row = batch.n_rows();
    view.n_rows = p.chunk + int32_t(seq.drafts.size());
    view.n_past = seq.n_computed;
    view.block_table = std::span<const int32_t>(seq.block_table);
    view.window_block_table = std::span<const int32_t>(seq.window_table);
    view.adapter = seq.request->request.adapter.get();
    view.state_slot = seq.state_slot;
    if (state_chunk_ > 1 && !seq.drafts.empty()) {
      // Drafts of a hybrid model: each row is cut as a decode step is (the
      // recurrent form), after the cuts of the rows it catches up on, and
      // the state before the first draft is kept to roll rejected ones
      // back (verify_drafts).
      seq.draft_splits.assign(
          std::upper_bound(seq.state_splits.begin(), seq.state_splits.end(), seq.n_computed),
          std::lower_bound(seq.state_splits.begin(), seq.state_splits.end(), seq.n_computed + p.chunk));
      for (size_t d = 0; d < seq.drafts.size(); ++d) seq.draft_splits.push_back(seq.n_computed + p.chunk + int32_t(d));
      view.state_splits = seq.draft_splits;
      seq.rollback.position = seq.n_computed + p.chunk;
      view.state_checkpoints = std::span<const ops::StateCheckpoint>(&seq.rollback, 1);
    } else if (state_chunk_ > 1) {
      // The cuts of earlier forwards inside these rows (a recompute), and this step's snapshots.
      auto first = std::upper_bound(seq.state_splits.begin(), seq.state_splits.end(), seq.n_computed);
      auto last = std::lower_bound(first, seq.state_splits.end(), seq.n_computed + view.n_rows);
      view.state_splits = std::span<const int32_t>(first, last);
      view.state_checkpoints = seq.checkpoints;
    }
    batch.sequences.push_back(view);
    bool reaches_end = seq.n_computed + p.chunk == int32_t(seq.tokens.size());
    for (int32_t r = 0; r < p.chunk; ++r) {
      int32_t pos = seq.n_computed + r;
      batch.tokens.push_back(seq.tokens[size_t(pos)]);
      batch.positions.push_back(pos);
      batch.wants_logits.push_back((reaches_end && r == p.chunk - 1) || seq.scores_position(pos) ? 1 : 0);
    }
    // Drafts follow the decode row as a short prefill chunk; each row's
    // logits judge the next draft (or give the token after the last).
    for (size_t d = 0; d < seq.drafts.size(); ++d) {
      batch.tokens.push_back(seq.drafts[d]);
      batch.positions.push_back(seq.n_computed + p.chunk + int32_t(d));
      batch.wants_logits.push_back(1);
    }
    // Prompt rows: every row of a chunk longer than one (prefill, or a
    // preempted sequence's recompute), and a lone row that is a prompt token
    // (the last one, when the rest came from the prefix cache).
    if ((p.chunk > 1 && !seq.catching_up) || seq.n_computed < seq.n_prompt) prompt_rows_ += uint64_t(p.chunk);
  }
  runner_->forward(batch, logits_);
}

void Engine::Scheduler::run(const std::vector<Planned>& planned, bool forward_queued) {
  if (!forward_queued) queue_forward(planned);

  // Sample in plan order; finishing a sequence destroys it, so collect first.
  // Logit rows come in batch row order: a sequence's prompt-scoring rows
  // (prompt_logprobs), then its last row when it reaches its end.
  int32_t logit_row = 0;
  std::vector<std::pair<Sequence*, int32_t>> to_sample;
  std::vector<std::pair<Sequence*, int32_t>> to_verify;  // sequences with drafts, their first logits row
  struct ScoredRow {
    Sequence* seq;
    int32_t pos, row;
  };
  std::vector<ScoredRow> scored;
  for (const Planned& p : planned) {
    Sequence& seq = *p.seq;
    for (int32_t r = 0; r < p.chunk; ++r)
      if (seq.scores_position(seq.n_computed + r)) scored.push_back({&seq, seq.n_computed + r, logit_row++});
    seq.n_computed += p.chunk;
    seq.catching_up = false;
    // Hybrid: a forward that ended off the chunk grid is a cut a recompute must make again.
    add_state_split(seq, seq.n_computed);
    register_full_blocks(seq);
    if (snapshots_) publish_snapshots(seq);
    if (!seq.drafts.empty()) {
      to_verify.push_back({&seq, logit_row});
      logit_row += 1 + int32_t(seq.drafts.size());
      continue;
    }
    if (seq.n_computed == int32_t(seq.tokens.size())) {
      if (seq.choice == 0 && seq.n_computed >= seq.n_prompt) seq.request->prompt_ready = true;
      to_sample.push_back({&seq, logit_row++});
    }
  }
  int32_t vocab = runner_->vocab_size();
  if (!scored.empty()) {
    // Few requests ask for this; the device's logits are copied whole.
    Tensor host = logits_.device() == Device::CPU ? logits_ : ops::to_device(logits_, Device::CPU);
    for (const ScoredRow& s : scored)
      score_prompt_position(*s.seq, s.pos, std::span<const float>(host.row_as<float>(s.row), size_t(vocab)));
  }
  // max_tokens 0 (prompt scoring only): the prompt is done, nothing is sampled.
  std::erase_if(to_sample, [&](const std::pair<Sequence*, int32_t>& entry) {
    Sequence* seq = entry.first;
    if (seq->request->request.max_tokens > 0) return false;
    GenerationEvent event;
    event.choice = seq->choice;
    event.finish = FinishReason::Length;
    event.prompt_logprobs = std::move(seq->prompt_logprobs);
    finish(seq, std::move(event));
    return true;
  });
  // Masks first, then every row is sampled on the pool: rows are
  // independent (each sequence has its own matcher, sampler and RNG; the
  // sampler's scratch is per thread; a compiled grammar that several rows
  // share builds its deferred masks under its own lock), so the result does
  // not depend on the thread. With a 128k-token vocabulary and 64
  // constrained rows the masks alone are a visible part of a decode step,
  // and on CUDA they are made while the step's forward runs (run-ahead):
  // spread over the pool, they stay shorter than it. Tokens are then
  // accepted one by one in plan order.
  struct RowSample {
    Sequence* seq;
    int32_t row;
    const uint32_t* mask;
    Sampler::Result result;
    std::exception_ptr error;
  };
  std::vector<RowSample> rows;
  rows.reserve(to_sample.size());
  for (auto [seq, row] : to_sample) rows.push_back({seq, row, nullptr, {}, nullptr});
  std::vector<char> any_allowed(rows.size(), 1);
  ThreadPool::global().run(int(rows.size()), [&](int i) {
    RowSample& r = rows[size_t(i)];
    if (!r.seq->constraint) return;
    try {
      bool allowed = true;
      r.mask = r.seq->constraint->next_mask(&allowed);
      any_allowed[size_t(i)] = allowed;
    } catch (...) {
      r.error = std::current_exception();  // rethrown on this thread below
    }
  });
  for (const RowSample& r : rows)
    if (r.error) std::rethrow_exception(r.error);
  size_t kept = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    // The grammar allows nothing (not even EOS): never sample an all -inf row.
    if (!any_allowed[i])
      finish(rows[i].seq, FinishReason::Stop);
    else
      rows[kept++] = rows[i];
  }
  rows.resize(kept);
  if (device_sampler_) {
    // Drafts are judged on the host: their rows' logits come back first
    // (a few rows; the other rows' stay on the device and are sampled there).
    std::vector<int32_t> verify_rows = host_verify_logits(to_verify);
    std::vector<DeviceSampler::Row> device_rows;
    device_rows.reserve(rows.size());
    for (const RowSample& r : rows) {
      device_rows.push_back({.sampler = r.seq->sampler.get(),
                             .logit_row = r.row,
                             .prompt = std::span<const int32_t>(r.seq->tokens.data(), size_t(r.seq->n_prompt)),
                             .output = std::span<const int32_t>(r.seq->tokens.data() + r.seq->n_prompt,
                                                                r.seq->tokens.size() - size_t(r.seq->n_prompt)),
                             .allowed_mask = r.mask,
                             .penalties = &r.seq->penalties});
    }
    if (!device_rows.empty()) {
      device_sampler_->launch(logits_, device_rows);
      if (run_ahead_enabled_ && to_verify.empty()) {
        std::vector<Sequence*> sampled;
        for (const RowSample& r : rows) sampled.push_back(r.seq);
        run_ahead(sampled);
      }
      std::vector<Sampler::Result> results = device_sampler_->collect();
      for (size_t i = 0; i < rows.size(); ++i) accept_token(*rows[i].seq, results[i]);
    }
    for (size_t i = 0; i < to_verify.size(); ++i) verify_drafts(*to_verify[i].first, verify_logits_, verify_rows[i]);
    return;
  }
  ThreadPool::global().run(int(rows.size()), [&](int i) {
    RowSample& r = rows[size_t(i)];
    try {
      SamplerRow sampler_row{
          .logits = std::span<float>(logits_.row_as<float>(r.row), size_t(vocab)),
          .prompt = std::span<const int32_t>(r.seq->tokens.data(), size_t(r.seq->n_prompt)),
          .output = std::span<const int32_t>(r.seq->tokens.data() + r.seq->n_prompt,
                                             r.seq->tokens.size() - size_t(r.seq->n_prompt)),
          .allowed_mask = r.mask,
      };
      r.result = r.seq->sampler->sample(sampler_row);
    } catch (...) {
      r.error = std::current_exception();  // rethrown on this thread below
    }
  });
  for (const RowSample& r : rows)
    if (r.error) std::rethrow_exception(r.error);
  for (const RowSample& r : rows) accept_token(*r.seq, r.result);
  for (auto [seq, row] : to_verify) verify_drafts(*seq, logits_, row);
}

std::vector<int32_t> Engine::Scheduler::host_verify_logits(
    const std::vector<std::pair<Sequence*, int32_t>>& to_verify) {
  std::vector<int32_t> first_rows;
  int32_t total = 0;
  for (const auto& [seq, row] : to_verify) {
    first_rows.push_back(total);
    total += 1 + int32_t(seq->drafts.size());
  }
  if (total == 0) return first_rows;
  const int64_t vocab = runner_->vocab_size();
  if (!verify_logits_.defined() || verify_logits_.dim(0) < total) {
    // Page-locked, so that each copy goes straight to it; grown in steps of
    // 16 rows (a step verifies at most speculative_max_batch × (1 + K)).
    const int64_t rows = (int64_t(total) + 15) / 16 * 16;
    verify_logits_ = ops::pinned_host_zeros(DType::F32, {rows, vocab});
  }
  // One copy per sequence: its 1 + k rows are adjacent in the logits.
  for (size_t i = 0; i < to_verify.size(); ++i) {
    const int32_t n = 1 + int32_t(to_verify[i].first->drafts.size());
    Tensor dst = verify_logits_.slice(0, first_rows[i], first_rows[i] + n);
    ops::copy(logits_.slice(0, to_verify[i].second, to_verify[i].second + n), dst);
  }
  return first_rows;
}

namespace {

// Rows up to which a CUDA forward computes each row to the bit as a decode
// of that row alone would: the GEMV kernels (n <= 8, backend/cuda/matmul.cu)
// keep every row's sums in the same order whatever the row count, and the
// decode attention splits each row's keys by the row's own length up to 7
// rows (kRowExactRows, backend/cuda/attention_decode_splits.h; from 8 rows
// its batch kernels take several keys a slot, or tensor cores). From 9 rows
// the GEMMs read activations rounded to 16 bits. A step that verifies
// drafts stays within them, so that its rows' logits are a decode's and
// greedy output is the same as without speculation (docs/speculative.md,
// "Exactness rests on the forward"). The CPU forward is row-independent at
// any row count.
constexpr int32_t kCudaRowExactRows = 7;

}  // namespace

void Engine::Scheduler::propose_drafts(const std::vector<Planned>& planned, int32_t& budget) {
  std::vector<DraftQuery> queries;
  std::vector<Sequence*> askers;
  std::vector<int32_t> planned_rows;  // each asker's planned rows
  int32_t left = budget;
  // planned holds this step's decode rows, one per sequence (a hybrid
  // sequence catching up: its rows up to its last token).
  if (runner_->device() == Device::CUDA) left = std::min(left, kCudaRowExactRows - int32_t(planned.size()));
  for (const Planned& p : planned) {
    Sequence& seq = *p.seq;
    const GenerationRequest& req = seq.request->request;
    if (!req.speculative || left <= 0) continue;
    // Room for every draft and the model's token after them: max_tokens, the
    // context, and the step's rows.
    const int32_t length = seq.speculation.next(
        {.max_drafts = options_.speculative_tokens, .costs = spec_costs_, .adaptive = options_.speculative_adaptive});
    const int32_t room = std::min({length, left, req.max_tokens - seq.n_generated - 1,
                                   runner_->context_length() - int32_t(seq.tokens.size()) - 1});
    if (room <= 0) continue;
    queries.push_back({.sequence = seq.order,
                       .tokens = seq.tokens,
                       .max_tokens = room,
                       .sampling = &req.sampling,
                       .constraint = options_.speculative_grammar_drafts ? seq.constraint.get() : nullptr});
    askers.push_back(&seq);
    planned_rows.push_back(p.chunk);
    left -= room;
  }
  if (queries.empty()) return;
  std::vector<Draft> drafts = proposer_->propose(queries);
  const size_t vocab = size_t(runner_->vocab_size());
  for (size_t i = 0; i < askers.size(); ++i) {
    Sequence& seq = *askers[i];
    Draft& draft = drafts[i];
    // Under a grammar, only the drafts it allows are run: the rest would be
    // rejected by the mask at verification anyway. (Proposers given the
    // constraint propose only allowed drafts; this cut is for those not.)
    if (seq.constraint) draft.tokens.resize(size_t(seq.constraint->allowed_prefix(draft.tokens)));
    if (draft.tokens.empty()) continue;
    if (!draft.probs.empty()) draft.probs.resize(draft.tokens.size() * vocab);
    // Hybrid: a slot for the state before the drafts (from the snapshot
    // pool, as a prefix snapshot's would be); none free, no drafts.
    if (state_chunk_ > 1) {
      std::optional<int32_t> slot = snapshots_->reserve_scratch();
      if (!slot) continue;
      seq.rollback.slot = *slot;
    }
    // Only blocks free now: speculation never preempts anyone.
    if (!ensure_blocks(seq, seq.n_computed + planned_rows[i] + int32_t(draft.tokens.size()))) {
      if (seq.rollback.slot >= 0) snapshots_->release(seq.rollback.slot);
      seq.rollback.slot = -1;
      continue;
    }
    budget -= int32_t(draft.tokens.size());
    seq.drafts = std::move(draft.tokens);
    seq.draft_probs = std::move(draft.probs);
  }
}

void Engine::Scheduler::verify_drafts(Sequence& seq, const Tensor& logits, int32_t first_row) {
  const std::vector<int32_t> drafts = std::move(seq.drafts);
  const std::vector<float> draft_probs = std::move(seq.draft_probs);
  seq.drafts.clear();
  seq.draft_probs.clear();
  ++spec_verify_steps_;
  spec_draft_tokens_ += drafts.size();
  const int32_t vocab = runner_->vocab_size();
  // K/V is valid for [0, base): the decode row's token is tokens[base - 1].
  // Row i's logits are those of position base - 1 + i, computed over the
  // drafts before it: the logits an unspeculated decode of that position
  // sees once those drafts are accepted (every row of the forward depends
  // only on its own prefix).
  const int32_t base = seq.n_computed;
  int32_t accepted = 0;
  for (size_t i = 0; i <= drafts.size(); ++i) {
    const uint32_t* mask = nullptr;
    if (seq.constraint) {
      // The matcher has advanced over the drafts accepted so far and never
      // over an unverified one, so this is the mask of an unspeculated step;
      // a draft the grammar forbids has p = 0 and is rejected here.
      bool any_allowed = true;
      mask = seq.constraint->next_mask(&any_allowed);
      if (!any_allowed) {
        spec_accepted_tokens_ += uint64_t(accepted);
        finish(&seq, FinishReason::Stop);
        return;
      }
    }
    SamplerRow row{
        .logits = std::span<float>(logits.row_as<float>(first_row + int32_t(i)), size_t(vocab)),
        .prompt = std::span<const int32_t>(seq.tokens.data(), size_t(seq.n_prompt)),
        .output = std::span<const int32_t>(seq.tokens.data() + seq.n_prompt, seq.tokens.size() - size_t(seq.n_prompt)),
        .allowed_mask = mask,
    };
    Sampler::Verdict verdict;
    if (i < drafts.size()) {
      const std::span<const float> q =
          draft_probs.empty() ? std::span<const float>()
                              : std::span<const float>(draft_probs).subspan(i * size_t(vocab), size_t(vocab));
      verdict = seq.sampler->verify_draft(row, drafts[i], q);
    } else {
      verdict.result = seq.sampler->sample(row);
    }
    if (!verdict.accepted) {
      // The model's own token ends the step. Positions past it hold K/V of
      // rejected drafts: past n_computed, they are rewritten before they are
      // read, and whole blocks past the next position go back to the pool.
      spec_accepted_tokens_ += uint64_t(accepted);
      seq.speculation.record(int32_t(drafts.size()), accepted);
      seq.n_computed = base + accepted;
      const int32_t bs = blocks_.block_size();
      const size_t keep = size_t((seq.n_computed + 1 + bs - 1) / bs);
      while (seq.block_table.size() > keep) {
        blocks_.release(seq.block_table.back());
        seq.block_table.pop_back();
      }
      while (seq.window_table.size() > keep) {
        if (seq.window_table.back() >= 0) window_blocks_->release(seq.window_table.back());
        seq.window_table.pop_back();
      }
      if (seq.rollback.slot >= 0) {
        // Hybrid: the state went through every draft row. Unless all were
        // accepted, it goes back to before them and the accepted ones are
        // computed again in the next step (their K/V rewritten with the
        // same values), each cut as the decode step it stands for.
        for (int32_t i = 1; i <= accepted; ++i) add_state_split(seq, base + i);
        if (accepted < int32_t(drafts.size())) {
          snapshots_->restore_scratch(seq.rollback.slot, seq.state_slot);
          seq.n_computed = base;
          seq.catching_up = accepted > 0;
        }
        snapshots_->release(seq.rollback.slot);
        seq.rollback.slot = -1;
      }
      register_full_blocks(seq);
      accept_token(seq, verdict.result);  // may finish the sequence
      return;
    }
    ++accepted;
    seq.n_computed = base + accepted;
    if (!append_token(seq, drafts[i], &verdict.result)) {  // eos, a stop string, max_tokens, grammar end
      spec_accepted_tokens_ += uint64_t(accepted);
      return;
    }
  }
}

// Running one step ahead. A decode step waits for the step before it only
// through its tokens, and the device sampler leaves those on the device
// (DeviceSampler::tokens). So with step t's sampling launched, the next
// step's forward is queued at once, fed from there, and only then does the
// host wait for step t's tokens and handle them (detokenize, stop strings,
// events). The GPU goes from step t's sampling straight into step t + 1
// instead of idling while the host takes the token back and launches the
// next graph (14–24 µs a step at batch 1 on the H200, 2–4% of a SmolLM2
// step: docs/perf-log/cuda-decode.md#run-ahead, "steps run one ahead of the host").
//
// The queued step must be the one plan() would make: it is queued only when
// every running sequence was sampled in this step, in running order, none
// is waiting to be admitted, each has its next position's KV block without
// a preemption, and no row is certain to finish with this token. Rows that
// do finish (EOS, a stop string, a grammar's end) were computed for nothing
// and are dropped (remove()); their K/V row lands in a block they held,
// before any later step can reuse it (one stream). A grammar's forced
// tokens (jump-forward) leave the queued row short of the sequence's end:
// it is not sampled, and the next plan() computes the forced tokens.
// Penalties and grammar masks need the host's tokens only when the next
// step's sampling is launched, after those tokens were accepted.
void Engine::Scheduler::run_ahead(const std::vector<Sequence*>& sampled) {
  if (!waiting_.empty() || sampled.size() != running_.size() || !device_sampler_->all_on_device()) return;
  // A step queued ahead has no drafts (plan() proposes them from the host's
  // tokens), and each step run ahead allows the next: while the next plan()
  // would speculate, it must make that plan.
  if (proposer_ && int32_t(sampled.size()) <= options_.speculative_max_batch)
    for (const Sequence* seq : sampled)
      if (seq->request->request.speculative) return;
  for (size_t i = 0; i < sampled.size(); ++i) {
    const Sequence& seq = *sampled[i];
    if (&seq != running_[i].get()) return;
    const GenerationRequest& req = seq.request->request;
    if (seq.n_generated + 1 >= req.max_tokens || int32_t(seq.tokens.size()) + 1 >= runner_->context_length()) return;
  }
  for (Sequence* seq : sampled)
    if (!ensure_blocks(*seq, seq->n_computed + 1)) return;

  model::ForwardBatch& batch = batch_;     // (this step's forward has taken it)
  batch.tokens.assign(sampled.size(), 0);  // any valid id: the device's are read
  batch.positions.clear();
  batch.wants_logits.assign(sampled.size(), 1);
  batch.sequences.clear();
  for (Sequence* seq : sampled) {
    batch.sequences.push_back({.first_row = int32_t(batch.positions.size()),
                               .n_rows = 1,
                               .n_past = seq->n_computed,
                               .block_table = std::span<const int32_t>(seq->block_table),
                               .window_block_table = std::span<const int32_t>(seq->window_table),
                               .adapter = seq->request->request.adapter.get(),
                               .state_slot = seq->state_slot});
    batch.positions.push_back(seq->n_computed);
  }
  if (!runner_->forward_from_device_tokens(batch, device_sampler_->tokens(), logits_)) return;
  std::vector<Planned> queued;
  for (Sequence* seq : sampled) queued.push_back({seq, 1});
  ahead_ = std::move(queued);
  ++overlapped_steps_;
}

// Text through the stop matcher; at the end of generation also what it held back.
static std::string through_stops(StopMatcher& stop, const std::string& text, bool at_end, bool* stopped) {
  StopMatcher::Step step = stop.push(text);
  *stopped = step.stopped;
  if (at_end && !step.stopped) step.emit += stop.flush();
  return std::move(step.emit);
}

void Engine::Scheduler::accept_token(Sequence& seq, const Sampler::Result& sampled) {
  if (!append_token(seq, sampled.token, &sampled)) return;
  const GenerationRequest& req = seq.request->request;
  if (!seq.constraint || !req.constraint.jump_forward || req.top_logprobs >= 0) return;
  // Jump-forward: while the grammar allows exactly one token, the sampler
  // would pick it whatever the logits, so it is appended unsampled; the next
  // plan() computes the chain as one prefill chunk whose last row gives the
  // logits of the following step. Same tokens as an unjumped run (a seeded
  // sampler still draws once per skipped step, so its stream stays aligned).
  for (;;) {
    bool room = seq.n_generated < req.max_tokens && int32_t(seq.tokens.size()) + 1 < runner_->context_length();
    if (!room) return;  // the sampled path reports "length" at the limit
    int32_t token = seq.constraint->sole_allowed_token();
    if (token < 0) return;
    if (!seq.constraint->accept(token, codec_.token_bytes(token))) return;
    seq.sampler->skip_draw();
    if (!append_token(seq, token, nullptr)) return;
  }
}

bool Engine::Scheduler::append_token(Sequence& seq, int32_t token, const Sampler::Result* sampled) {
  RequestState& state = *seq.request;
  const GenerationRequest& req = state.request;
  GenerationEvent event;
  event.choice = seq.choice;
  event.tokens.push_back(token);
  if (seq.scores_prompt && !seq.prompt_logprobs.empty()) event.prompt_logprobs = std::move(seq.prompt_logprobs);
  if (req.top_logprobs >= 0 && sampled) {
    TokenLogprob lp{.token = token, .text = codec_.token_bytes(token), .logprob = sampled->logprob, .top = {}};
    for (auto [id, value] : sampled->top)
      lp.top.push_back({.token = id, .text = codec_.token_bytes(id), .logprob = value});
    event.logprobs.push_back(std::move(lp));
  }
  seq.tokens.push_back(token);
  ++seq.n_generated;
  ++generated_;
  ++state.usage.completion_tokens;

  bool is_eos = !req.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
  // Sampled tokens advance the matcher here; forced ones were accepted by the caller.
  if (seq.constraint && sampled) seq.constraint->accept(token, codec_.token_bytes(token));
  bool grammar_done = seq.constraint && seq.constraint->terminated();
  bool out_of_room = seq.n_generated >= req.max_tokens || int32_t(seq.tokens.size()) >= runner_->context_length();
  bool at_end = out_of_room || grammar_done;
  bool stopped = false;
  std::optional<FinishReason> reason;
  if (is_eos) {
    // The eos token itself is not text.
    event.text = through_stops(*seq.stop, seq.text->flush(), true, &stopped);
    reason = FinishReason::Stop;
  } else {
    std::string piece = seq.text->push(token);
    if (at_end) piece += seq.text->flush();
    event.text = through_stops(*seq.stop, piece, at_end, &stopped);
    // A complete grammar is a stop, even when max_tokens was reached on the same token.
    if (stopped || grammar_done)
      reason = FinishReason::Stop;
    else if (out_of_room)
      reason = FinishReason::Length;
  }
  if (reason) {
    event.finish = reason;
    finish(&seq, std::move(event));
    return false;
  }
  state.handle->push(std::move(event));
  if (req.on_events) req.on_events();
  return true;
}

void Engine::Scheduler::score_prompt_position(Sequence& seq, int32_t pos, std::span<const float> logits) {
  const int32_t token = seq.tokens[size_t(pos) + 1];
  const double log_z = log_softmax_normalizer(logits);
  TokenLogprob lp{
      .token = token, .text = codec_.token_bytes(token), .logprob = float(logits[size_t(token)] - log_z), .top = {}};
  for (auto [id, value] : top_logprobs(logits, seq.request->request.top_logprobs, log_z))
    lp.top.push_back({.token = id, .text = codec_.token_bytes(id), .logprob = value});
  seq.prompt_logprobs.push_back(std::move(lp));
  seq.prompt_scored = pos + 1;
}

void Engine::Scheduler::finish(Sequence* seq, FinishReason reason, const std::string& error) {
  GenerationEvent event;
  event.choice = seq->choice;
  event.finish = reason;
  event.error = error;
  finish(seq, std::move(event));
}

void Engine::Scheduler::finish(Sequence* seq, GenerationEvent event) {
  RequestState& state = *seq->request;
  // Forks waiting for this choice's prompt must not wait forever.
  if (seq->choice == 0) state.prompt_ready = true;
  if (--state.open_choices == 0) {
    event.done = true;
    event.usage = state.usage;
    ++finished_requests_;
  }
  std::shared_ptr<RequestState> keep = seq->request;  // outlives the sequence
  remove(seq);
  keep->handle->push(std::move(event));
  if (keep->request.on_events) keep->request.on_events();
}

void Engine::Scheduler::remove(Sequence* seq) {
  if (ahead_) std::erase_if(*ahead_, [&](const Planned& p) { return p.seq == seq; });
  release_blocks(*seq);
  if (proposer_) proposer_->forget(seq->order);
  auto match = [&](const auto& s) { return s.get() == seq; };
  if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
    running_.erase(it);
    return;
  }
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), match); it != waiting_.end()) waiting_.erase(it);
}

void Engine::Scheduler::finish_all(FinishReason reason, const std::string& message) {
  while (!running_.empty()) finish(running_.back().get(), reason, message);
  while (!waiting_.empty()) finish(waiting_.back().get(), reason, message);
  if (ahead_) {
    // Its forward may still be running, on the KV cache that goes next.
    ahead_.reset();
    ops::synchronize(runner_->device());
  }
}

EngineStats Engine::Scheduler::stats() const {
  EngineStats s;
  BlockAllocatorStats b = blocks_.stats();
  s.waiting = int32_t(waiting_.size());
  s.running = int32_t(running_.size());
  s.kv_blocks_total = b.total_blocks;
  s.kv_blocks_used = b.used_blocks;
  s.kv_blocks_cached = b.cached_free_blocks;
  if (window_blocks_) {
    const BlockAllocatorStats w = window_blocks_->stats();
    s.kv_window_blocks_total = w.total_blocks;
    s.kv_window_blocks_used = w.used_blocks;
    s.kv_window_blocks_cached = w.cached_free_blocks;
  }
  s.prefix_hit_blocks = b.prefix_hit_blocks;
  s.prefix_query_blocks = b.prefix_query_blocks;
  s.prefix_hit_partial_tokens = partial_hit_tokens_;
  s.preemptions = preemptions_;
  s.steps = steps_;
  s.overlapped_steps = overlapped_steps_;
  s.prompt_tokens_computed = prompt_rows_;
  s.generated_tokens = generated_;
  s.requests_finished = finished_requests_;
  s.spec_verify_steps = spec_verify_steps_;
  s.spec_draft_tokens = spec_draft_tokens_;
  s.spec_accepted_tokens = spec_accepted_tokens_;
  if (snapshots_) {
    const StateSnapshotStats snap = snapshots_->stats();
    s.state_snapshot_slots = snap.slots;
    s.state_snapshots_kept = snap.kept;
    s.state_snapshots_saved = snap.saved;
    s.state_snapshots_restored = snap.restored;
    s.state_snapshots_replaced = snap.replaced;
    s.state_snapshots_dropped = snap.dropped;
  }
  return s;
}

}  // namespace brioche::engine
