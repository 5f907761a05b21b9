// A deterministic stand-in for the transformer, for scheduler tests.
//
// Its "K/V" for position p is one 64-bit value: kv[p] = mix(kv[p-1], token[p], p),
// stored in the paged cache through the block table exactly like real K/V,
// and the logits of a row are pseudo-random functions of kv[p]. So a row's
// logits depend on the whole prefix *as read back from the cache*: a wrong
// block table, a stale shared block or a bad recompute changes the tokens.
// Like the CPU forward, every row is computed independently of the batch.
#pragma once

#include <chrono>
#include <thread>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/model_runner.h"

namespace brioche::engine::testing {

inline uint64_t toy_mix(uint64_t a, uint64_t b) {
  uint64_t h = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 29;
  return h;
}

struct ToyConfig {
  int32_t vocab = 64;
  int32_t context = 512;
  int32_t block_size = 4;
  int32_t n_blocks = 64;
  // Time each forward takes, so that tests relying on requests overlapping
  // (preemption) do not race a model that finishes before the next submit.
  std::chrono::microseconds step_delay{0};
};

class ToyRunner final : public ModelRunner {
 public:
  explicit ToyRunner(ToyConfig config) : config_(config), kv_(size_t(config.n_blocks) * config.block_size, 0) {}
  int32_t vocab_size() const override { return config_.vocab; }
  int32_t context_length() const override { return config_.context; }
  int32_t kv_block_size() const override { return config_.block_size; }
  int32_t kv_block_count() const override { return config_.n_blocks; }

  // Row logits from a K/V value: [vocab] values in [0, 10).
  static void logits_for(uint64_t kv, int32_t vocab, float* out) {
    for (int32_t v = 0; v < vocab; ++v) out[v] = float(toy_mix(kv, uint64_t(v)) % 10000) / 1000.0f;
  }

  void forward(const model::ForwardBatch& batch, Tensor& logits) override {
    if (config_.step_delay.count() > 0) std::this_thread::sleep_for(config_.step_delay);
    logits = Tensor::zeros(DType::F32, {int64_t(batch.n_logit_rows()), int64_t(config_.vocab)});
    int32_t out_row = 0;
    for (const model::SequenceView& s : batch.sequences) {
      BRIOCHE_CHECK(int64_t(s.block_table.size()) * config_.block_size >= s.n_past + s.n_rows,
                    "toy forward: block table too short");
      for (int32_t r = 0; r < s.n_rows; ++r) {
        int32_t row = s.first_row + r;
        int32_t pos = s.n_past + r;
        BRIOCHE_CHECK(batch.positions[size_t(row)] == pos, "toy forward: position mismatch");
        uint64_t prev = pos == 0 ? 12345 : kv_[slot(s, pos - 1)];
        uint64_t value = toy_mix(prev, uint64_t(batch.tokens[size_t(row)]) * 1000003ull + uint64_t(pos));
        kv_[slot(s, pos)] = value;
        if (batch.wants_logits[size_t(row)]) logits_for(value, config_.vocab, logits.row_as<float>(out_row++));
      }
    }
    ++forward_calls;
    rows_run += batch.n_rows();
  }

  bool copy_kv_prefix(int32_t src, int32_t dst, int32_t n_tokens) override {
    BRIOCHE_CHECK(n_tokens >= 0 && n_tokens <= config_.block_size, "toy copy: ", n_tokens, " positions");
    for (int32_t i = 0; i < n_tokens; ++i)
      kv_[size_t(dst) * config_.block_size + size_t(i)] = kv_[size_t(src) * config_.block_size + size_t(i)];
    ++kv_copies;
    return true;
  }

  // Greedy continuation computed directly, without any cache: the reference.
  static std::vector<int32_t> greedy_reference(const std::vector<int32_t>& prompt, int32_t n_new, int32_t vocab) {
    uint64_t kv = 12345;
    std::vector<int32_t> tokens = prompt, out;
    std::vector<float> row(static_cast<size_t>(vocab));
    for (size_t p = 0; p < tokens.size(); ++p) kv = toy_mix(kv, uint64_t(tokens[p]) * 1000003ull + p);
    for (int32_t i = 0; i < n_new; ++i) {
      logits_for(kv, vocab, row.data());
      int32_t best = 0;
      for (int32_t v = 1; v < vocab; ++v)
        if (row[size_t(v)] > row[size_t(best)]) best = v;
      out.push_back(best);
      kv = toy_mix(kv, uint64_t(best) * 1000003ull + tokens.size());
      tokens.push_back(best);
    }
    return out;
  }

  int64_t forward_calls = 0;
  int64_t rows_run = 0;
  int64_t kv_copies = 0;

 private:
  size_t slot(const model::SequenceView& s, int32_t pos) const {
    return size_t(s.block_table[size_t(pos / config_.block_size)]) * config_.block_size +
           size_t(pos % config_.block_size);
  }
  ToyConfig config_;
  std::vector<uint64_t> kv_;  // [n_blocks * block_size]
};

// Token t is the letter 'a' + t % 26 (so stop strings can be tested); token 0 is eos when enabled.
class ToyCodec final : public TextCodec {
 public:
  explicit ToyCodec(std::vector<int32_t> eos = {}) : eos_(std::move(eos)) {}
  std::vector<int32_t> encode(std::string_view text, const TextEncoding&) const override {
    std::vector<int32_t> out;
    for (char c : text) out.push_back(int32_t(uint8_t(c)) % 64);
    return out;
  }
  std::vector<int32_t> eos_ids() const override { return eos_; }
  std::string token_bytes(int32_t token) const override { return std::string(1, char('a' + token % 26)); }
  std::unique_ptr<TextStream> new_stream() const override {
    struct Stream final : TextStream {
      std::string push(int32_t token) override { return std::string(1, char('a' + token % 26)); }
      std::string flush() override { return {}; }
    };
    return std::make_unique<Stream>();
  }

 private:
  std::vector<int32_t> eos_;
};

}  // namespace brioche::engine::testing
