// What the engine needs from a model and a tokenizer, as two small interfaces.
//
// The engine's scheduler only builds ragged batches and reads logits; it does
// not care whether the rows go through the real transformer or through a toy
// model in a test. ModelRunner wraps model::Model + model::KvCache; TextCodec
// wraps tokenizer::Tokenizer (+ StreamingDetokenizer). Tests plug in small
// deterministic fakes to check scheduling (block tables, prefix reuse,
// preemption) in milliseconds.
#pragma once

#include <algorithm>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "model/forward_batch.h"

namespace brioche::model {
class Model;
}
namespace brioche::tokenizer {
class Tokenizer;
}

namespace brioche::engine {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t context_length() const = 0;  // positions a sequence may use
  virtual int32_t kv_block_size() const = 0;
  virtual int32_t kv_block_count() const = 0;
  // The window pool (model::KvCache's, for sliding-window layers): its
  // blocks, addressed by SequenceView::window_block_table, and the window
  // they serve (a row at p reads p - window + 1 .. p there). 0 blocks: no
  // pool, every layer keeps every block of the main table.
  virtual int32_t kv_window_block_count() const { return 0; }
  virtual int32_t kv_window() const { return 0; }
  // Where the model computes: with Device::CUDA the scheduler asks for
  // device logits and samples them there (device_sampler.h).
  virtual Device device() const { return Device::CPU; }
  // Writes K/V of every row through the block tables and sets
  // logits = f32 [batch.n_logit_rows(), vocab_size()] in row order.
  // Every row's result depends only on its own sequence (row-independent math).
  virtual void forward(const model::ForwardBatch& batch, Tensor& logits) = 0;
  // forward() with the rows' tokens on the device (model::Model::
  // forward_from_device_tokens): false, with nothing queued, when the runner
  // cannot take this batch that way.
  virtual bool forward_from_device_tokens(const model::ForwardBatch& batch, const Tensor& tokens, Tensor& logits) {
    (void)batch, (void)tokens, (void)logits;
    return false;
  }
  // Per-sequence recurrent state slots the model keeps (hybrid models:
  // model::KvCache::n_state_slots); 0: its only per-sequence state is K/V.
  // A running sequence holds one (SequenceView::state_slot), so at most this
  // many sequences run at once.
  virtual int32_t state_slot_count() const { return 0; }
  // Snapshot slots beside them (state slots state_slot_count() ..
  // + state_snapshot_count() - 1): the prefix cache of hybrid models keeps
  // the state at a prompt's end there (engine/scheduler.cpp, docs/server.md).
  virtual int32_t state_snapshot_count() const { return 0; }
  // Copies the recurrent state of slot src over slot dst (either kind).
  virtual void copy_state(int32_t src, int32_t dst) {
    fail("copy_state(", src, ", ", dst, "): this model keeps no recurrent state");
  }
  // Positions at which a sequence's rows may be split into forwards without
  // changing any result (hybrid models: the delta rule's chunk,
  // ops::kDeltaRuleChunk); 1: anywhere.
  virtual int32_t state_chunk() const { return 1; }
  // Copies K/V of the first n_tokens positions of block src into block dst
  // (prefix sharing below block granularity). A runner that cannot returns
  // false and the scheduler shares whole blocks only.
  virtual bool copy_kv_prefix(int32_t src, int32_t dst, int32_t n_tokens) {
    (void)src, (void)dst, (void)n_tokens;
    return false;
  }
};

// Incremental ids -> text for one generated sequence.
class TextStream {
 public:
  virtual ~TextStream() = default;
  virtual std::string push(int32_t token) = 0;  // complete UTF-8 only
  virtual std::string flush() = 0;
};

// How TextCodec::encode turns text into tokens.
struct TextEncoding {
  bool add_bos = false;  // prepend the vocabulary's BOS (when it says to add one)
};

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  virtual std::vector<int32_t> encode(std::string_view text, const TextEncoding& encoding) const = 0;
  virtual std::vector<int32_t> eos_ids() const = 0;
  // The bytes one token decodes to (for logprobs "token" / "bytes").
  virtual std::string token_bytes(int32_t token) const = 0;
  virtual std::unique_ptr<TextStream> new_stream() const = 0;
};

struct KvSizing {
  int32_t block_size = 16;
  int32_t n_blocks = 0;  // 0: derive from kv_memory_bytes
  // 0: fit the device. On CUDA, kKvShareOfFreeMemory of the memory left
  // free after the weights, less a reserve for activations, logits and
  // workspaces (as vLLM's --gpu-memory-utilization); on the CPU, 256 MiB.
  size_t kv_memory_bytes = 256ull << 20;
  int32_t max_context = 0;  // 0: the model's trained context (capped at 8192)
  // f16 on every device by default: batched decode attention is bound by the
  // bytes of K/V it reads (half of f32's; llama.cpp's default too). F32 (CPU
  // only) keeps attention exact.
  DType dtype = DType::F16;
  // Hybrid models (recurrent state per sequence): state slots, taken from
  // the same budget before the KV blocks. 0: as many as a quarter of the
  // budget holds, 1 to kMaxStateSlots.
  int32_t state_slots = 0;
  // Snapshot slots for the prefix cache of hybrid models, beside the state
  // slots and from the same budget. -1: as many as state slots; 0: none
  // (no prefix reuse for hybrid models).
  int32_t state_snapshots = -1;
  // Sliding-window layers' own pool of blocks (docs/server.md "Sliding-window
  // memory"): -1: sized for `window_sequences` sequences' windows plus one
  // step of `window_step_rows` rows, and the main pool gets what that saves
  // of the budget; 0: none (sliding layers keep every block, as full ones
  // do); > 0: that many blocks. Only for models with sliding layers and no
  // recurrent state.
  int32_t window_blocks = -1;
  int32_t window_sequences = 64;   // Engine::from_model: SchedulerOptions::max_running
  int32_t window_step_rows = 512;  // Engine::from_model: SchedulerOptions::max_batch_tokens
};

inline constexpr int32_t kMaxStateSlots = 64;

inline constexpr double kKvShareOfFreeMemory = 0.9;
// What the KV cache leaves free on a device of `total_bytes`: max(4 GiB, 10%).
inline size_t kv_device_reserve_bytes(size_t total_bytes) {
  return std::max<size_t>(size_t(4) << 30, total_bytes / 10);
}

// The KV cache's memory budget for `sizing` on `device` (kv_memory_bytes,
// or what 0 means there).
size_t kv_budget_bytes(const KvSizing& sizing, Device device);

// The real thing: model::Model + a KvCache sized by `sizing`.
std::unique_ptr<ModelRunner> make_model_runner(std::shared_ptr<model::Model> model, const KvSizing& sizing);
std::unique_ptr<TextCodec> make_text_codec(std::shared_ptr<const tokenizer::Tokenizer> tokenizer);

}  // namespace brioche::engine
