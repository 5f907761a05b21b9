#include "engine/model_runner.h"

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "ops/device.h"
#include "ops/recurrent_sequence.h"
#include "tokenizer/tokenizer.h"

namespace brioche::engine {
namespace {

// The KV budget of KvSizing::kv_memory_bytes == 0 (see there).
size_t device_fitted_kv_bytes(Device device) {
  if (device != Device::CUDA) return size_t(256) << 20;
  ops::DeviceMemory memory = ops::device_memory(device);
  size_t reserve = kv_device_reserve_bytes(memory.total_bytes);
  size_t usable = memory.free_bytes > reserve ? memory.free_bytes - reserve : 0;
  return std::max<size_t>(size_t(double(usable) * kKvShareOfFreeMemory), size_t(256) << 20);
}

class TransformerRunner final : public ModelRunner {
 public:
  TransformerRunner(std::shared_ptr<model::Model> model, const KvSizing& sizing) : model_(std::move(model)) {
    const model::ModelConfig& config = model_->config();
    BRIOCHE_CHECK(sizing.dtype == DType::F16 || (sizing.dtype == DType::F32 && model_->device() == Device::CPU),
                  "KV cache type ", dtype_name(sizing.dtype),
                  model_->device() == Device::CUDA ? " on CUDA" : " on the CPU", ": expected f16, or f32 on the CPU");
    int32_t trained = config.max_context > 0 ? config.max_context : 2048;
    context_ = sizing.max_context > 0 ? sizing.max_context : std::min<int32_t>(trained, 8192);
    int32_t n_blocks = sizing.n_blocks;
    if (n_blocks <= 0) {
      size_t per_block = model::KvCache::block_bytes(config, sizing.block_size, sizing.dtype);
      size_t budget = kv_budget_bytes(sizing, model_->device());
      n_blocks = int32_t(std::clamp<size_t>(budget / per_block, 1, size_t(INT32_MAX)));
      // Always room for at least one full-length sequence.
      n_blocks = std::max(n_blocks, (context_ + sizing.block_size - 1) / sizing.block_size + 1);
    }
    if (config.has_sequence_state()) {
      // A recurrent state slot per running sequence, from the same budget:
      // the slots take at most a quarter of it, the KV blocks the rest.
      const size_t per_slot = model::KvCache::state_slot_bytes(config);
      const size_t budget =
          sizing.kv_memory_bytes > 0 ? sizing.kv_memory_bytes : device_fitted_kv_bytes(model_->device());
      state_slots_ = sizing.state_slots > 0
                         ? sizing.state_slots
                         : int32_t(std::clamp<size_t>(budget / 4 / std::max<size_t>(per_slot, 1), 1, kMaxStateSlots));
      snapshots_ = sizing.state_snapshots < 0 ? state_slots_ : sizing.state_snapshots;
      const size_t per_block = model::KvCache::block_bytes(config, sizing.block_size, sizing.dtype);
      if (sizing.n_blocks <= 0 && per_block > 0) {
        const size_t state_bytes = per_slot * size_t(state_slots_ + snapshots_);
        const int32_t state_blocks = int32_t((state_bytes + per_block - 1) / per_block);
        n_blocks = std::max(n_blocks - state_blocks, (context_ + sizing.block_size - 1) / sizing.block_size + 1);
      }
    }
    int32_t window_blocks = 0;
    window_ = model::KvCache::max_window(config);
    if (window_ > 0 && sizing.window_blocks != 0 && !config.has_sequence_state()) {
      // A sequence's live window blocks: the W - 1 positions before its
      // next row and the block of that row; a step's rows add theirs.
      const int32_t bs = sizing.block_size;
      const int64_t per_sequence = (window_ - 1 + bs - 1) / bs + 2;
      BRIOCHE_CHECK(sizing.window_blocks < 0 || sizing.window_blocks >= per_sequence, "KV cache: a window pool of ",
                    sizing.window_blocks, " blocks cannot hold one sequence's sliding window (", window_,
                    " positions in blocks of ", bs, " need at least ", per_sequence,
                    " blocks; 0 keeps every block instead)");
      const int64_t wanted = sizing.window_blocks > 0 ? sizing.window_blocks
                                                      : int64_t(std::max(sizing.window_sequences, 1)) * per_sequence +
                                                            (std::max(sizing.window_step_rows, 1) + bs - 1) / bs;
      // Never more than the main pool: both tables cover the same positions.
      window_blocks = int32_t(std::min<int64_t>(wanted, n_blocks));
      const size_t window_bytes = model::KvCache::window_block_bytes(config, bs, sizing.dtype);
      const size_t main_bytes = model::KvCache::block_bytes(config, bs, sizing.dtype) - window_bytes;
      if (sizing.n_blocks <= 0 && main_bytes > 0) {
        // The budget that held n_blocks of every layer holds more main
        // blocks once the sliding layers keep only window_blocks.
        const size_t budget = size_t(n_blocks) * (main_bytes + window_bytes);
        n_blocks = int32_t(
            std::clamp<size_t>((budget - size_t(window_blocks) * window_bytes) / main_bytes, 1, size_t(INT32_MAX)));
      }
    }
    cache_ =
        std::make_unique<model::KvCache>(config, model::KvCacheOptions{.block_size = sizing.block_size,
                                                                       .n_blocks = n_blocks,
                                                                       .dtype = sizing.dtype,
                                                                       .device = model_->device(),
                                                                       .n_window_blocks = window_blocks,
                                                                       .n_state_slots = state_slots_ + snapshots_});
  }

  int32_t vocab_size() const override { return model_->config().vocab_size; }
  int32_t context_length() const override { return context_; }
  int32_t kv_block_size() const override { return cache_->block_size(); }
  int32_t kv_block_count() const override { return cache_->n_blocks(); }
  int32_t kv_window_block_count() const override { return cache_->n_window_blocks(); }
  int32_t kv_window() const override { return cache_->n_window_blocks() > 0 ? window_ : 0; }
  int32_t state_slot_count() const override { return state_slots_; }
  int32_t state_snapshot_count() const override { return snapshots_; }
  void copy_state(int32_t src, int32_t dst) override { cache_->copy_state_slot(src, dst); }
  int32_t state_chunk() const override { return state_slots_ > 0 ? ops::kDeltaRuleChunk : 1; }
  Device device() const override { return model_->device(); }
  void forward(const model::ForwardBatch& batch, Tensor& logits) override { model_->forward(batch, *cache_, logits); }
  bool forward_from_device_tokens(const model::ForwardBatch& batch, const Tensor& tokens, Tensor& logits) override {
    return model_->forward_from_device_tokens(batch, tokens, *cache_, logits);
  }
  bool copy_kv_prefix(int32_t src, int32_t dst, int32_t n_tokens) override {
    // Under tensor parallelism this cache is rank 0's KV heads only: a copy
    // here would leave the other ranks' blocks uncopied (whole-block sharing,
    // which needs no copy, still applies).
    if (!model_->kv_cache_is_whole()) return false;
    // The window pool's blocks are not addressed by src/dst (a second table).
    if (cache_->n_window_blocks() > 0) return false;
    cache_->copy_block_prefix(src, dst, n_tokens);
    return true;
  }

 private:
  std::shared_ptr<model::Model> model_;
  std::unique_ptr<model::KvCache> cache_;
  int32_t context_ = 0;
  int32_t window_ = 0;       // the model's largest sliding window (0: none)
  int32_t state_slots_ = 0;  // hybrid models: recurrent state slots in cache_ for running sequences
  int32_t snapshots_ = 0;    // and snapshot slots after them (the prefix cache's)
};

class DetokenizerStream final : public TextStream {
 public:
  explicit DetokenizerStream(std::shared_ptr<const tokenizer::Tokenizer> tokenizer)
      : tokenizer_(std::move(tokenizer)), detok_(*tokenizer_, {.skip_special = true}) {}
  std::string push(int32_t token) override { return detok_.push(token); }
  std::string flush() override { return detok_.flush(); }

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  tokenizer::StreamingDetokenizer detok_;
};

class TokenizerCodec final : public TextCodec {
 public:
  explicit TokenizerCodec(std::shared_ptr<const tokenizer::Tokenizer> tokenizer) : tokenizer_(std::move(tokenizer)) {}
  std::vector<int32_t> encode(std::string_view text, const TextEncoding& encoding) const override {
    return tokenizer_->encode(text, {.add_special = encoding.add_bos, .parse_special = true});
  }
  std::vector<int32_t> eos_ids() const override { return tokenizer_->eos_ids(); }
  std::string token_bytes(int32_t token) const override { return tokenizer_->token_bytes(token); }
  std::unique_ptr<TextStream> new_stream() const override { return std::make_unique<DetokenizerStream>(tokenizer_); }

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
};

}  // namespace

size_t kv_budget_bytes(const KvSizing& sizing, Device device) {
  return sizing.kv_memory_bytes > 0 ? sizing.kv_memory_bytes : device_fitted_kv_bytes(device);
}

std::unique_ptr<ModelRunner> make_model_runner(std::shared_ptr<model::Model> model, const KvSizing& sizing) {
  BRIOCHE_CHECK(model != nullptr, "make_model_runner: expected a loaded model, got null");
  return std::make_unique<TransformerRunner>(std::move(model), sizing);
}

std::unique_ptr<TextCodec> make_text_codec(std::shared_ptr<const tokenizer::Tokenizer> tokenizer) {
  BRIOCHE_CHECK(tokenizer != nullptr, "make_text_codec: expected a tokenizer, got null");
  return std::make_unique<TokenizerCodec>(std::move(tokenizer));
}

}  // namespace brioche::engine
