// Per-token log-probabilities through the frozen LM head, and their backward.
//
//   z = h·Wᵀ (vocab V),  logp_t = z_t − lse(z),  lse = log Σ_v e^{z_v}
//   d logp_t / d z_v = 1[v = t] − softmax(z)_v,   dh = Σ_v dz_v W_v
//
// FusedLogpHead never materialises [tokens, V] logits: the forward walks the
// vocabulary in chunks with an online log-sum-exp (running max m and sum s:
// on a chunk with max m', s ← s·e^{m−m'} + Σ e^{z−m'}), keeping only lse per
// token; the backward recomputes each chunk's logits, forms the chunk's dz
// and accumulates dh = dz·W_chunk. Memory: [tokens, chunk] instead of
// [tokens, V]. It runs on the device of the hidden states (ops::logp_head_*,
// ops::gather_rows); only the [n_scored] log-probs and their gradients cross
// to and from the host. PlainLogpHead is the full-logits reference (CPU).
#pragma once

#include <span>
#include <vector>

#include "core/tensor.h"
#include "train/token_batch.h"

namespace brioche::train {

class LogpHead {
 public:
  virtual ~LogpHead() = default;
  // hidden: final-normed f32 [n_rows, H]; returns logp per scored token.
  virtual std::vector<float> forward(const Tensor& hidden, std::span<const ScoredToken> scored) = 0;
  // d_logp per scored token (from the loss); writes d_hidden [n_rows, H] on
  // the hidden states' device (zero on rows no token is scored from).
  virtual void backward(std::span<const float> d_logp, Tensor& d_hidden) = 0;
};

class FusedLogpHead final : public LogpHead {
 public:
  // w_out: [V, H] any dtype; chunk: vocabulary rows per tile.
  FusedLogpHead(const Tensor& w_out, int64_t chunk);
  std::vector<float> forward(const Tensor& hidden, std::span<const ScoredToken> scored) override;
  void backward(std::span<const float> d_logp, Tensor& d_hidden) override;

 private:
  const Tensor& w_;
  int64_t chunk_;
  Tensor gathered_;                      // [n_scored, H] hidden rows of the scored tokens
  Tensor lse_;                           // f32 [n_scored] on the hidden's device
  std::vector<int32_t> rows_, targets_;  // [n_scored] per scored token
};

class PlainLogpHead final : public LogpHead {
 public:
  explicit PlainLogpHead(const Tensor& w_out) : w_(w_out) {}
  std::vector<float> forward(const Tensor& hidden, std::span<const ScoredToken> scored) override;
  void backward(std::span<const float> d_logp, Tensor& d_hidden) override;

 private:
  const Tensor& w_;
  Tensor gathered_;  // [n_scored, H]
  Tensor probs_;     // [n_scored, V] softmax (the memory the fused head avoids)
  std::vector<ScoredToken> scored_;
};

// Gemma's soft-capped head: logits c·tanh(z/c) with z = h·Wᵀ, on the CPU,
// one vocabulary chunk of z at a time (never [tokens, V]):
//   forward: online log-sum-exp of the capped logits over the chunks
//   backward, per chunk again: dℓ/dz_v = d_logp·(1[v = t] − p_v)·(1 − tanh²(z_v/c))
class SoftcapLogpHead final : public LogpHead {
 public:
  // w_out: [V, H] any dtype; cap > 0; chunk: vocabulary rows per tile.
  SoftcapLogpHead(const Tensor& w_out, float cap, int64_t chunk);
  std::vector<float> forward(const Tensor& hidden, std::span<const ScoredToken> scored) override;
  void backward(std::span<const float> d_logp, Tensor& d_hidden) override;

 private:
  // z = gathered·W[v0:v1]ᵀ into tile_, then capped in place; returns the capped tile [n, v1 − v0].
  Tensor capped_chunk(int64_t v0, int64_t v1);

  const Tensor& w_;
  float cap_;
  int64_t chunk_;
  Tensor gathered_, tile_;
  std::vector<double> lse_;
  std::vector<ScoredToken> scored_;
};

}  // namespace brioche::train
