// What the training loop needs of a model's layers: tokens → final-normed
// hidden states (saving what the backward needs), and hidden-state gradients
// → LoRA gradients. TrainModel implements it for the Llama family,
// Gemma4TrainModel for Gemma 4; the LM head and the loss live apart
// (lm_head.h, losses.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "model/model_config.h"
#include "train/token_batch.h"

namespace brioche::train {

struct ForwardOptions {
  uint64_t dropout_seed = 0;
  bool adapter_enabled = true;
  bool for_backward = true;  // false: inference-only (eval, reference log-probs), no LoRA dropout
};

class TrainStack {
 public:
  virtual ~TrainStack() = default;

  virtual const model::ModelConfig& config() const = 0;
  // Layers below this one carry no adapter and feed none that does: their
  // output depends only on the tokens, so callers may cache it (frozen_prefix).
  virtual int first_trainable_layer() const = 0;
  // Residual stream entering first_trainable_layer().  [n_rows, hidden]
  virtual Tensor frozen_prefix(const TokenBatch& batch) const = 0;
  // From the frozen-prefix output to the final-normed hidden states [n_rows, hidden].
  // With for_backward the batch must stay alive until backward().
  virtual Tensor forward(const TokenBatch& batch, const Tensor& prefix_out, const ForwardOptions& options) = 0;
  // Convenience: frozen_prefix + forward.
  Tensor forward(const TokenBatch& batch, const ForwardOptions& options) {
    return forward(batch, frozen_prefix(batch), options);
  }
  // d_hidden: d loss / d final-normed hidden [n_rows, hidden]. Accumulates LoRA gradients.
  virtual void backward(Tensor d_hidden) = 0;
  // The longest batch (rows) the caller will run (for stacks that pin host buffers).
  virtual void reserve_offload_rows(int64_t rows) { (void)rows; }
  // Bytes held for the backward after the last forward; 0 after the backward.
  virtual size_t saved_bytes() const = 0;
  // Of those, bytes in host memory.
  virtual size_t offloaded_bytes() const { return 0; }
  virtual Device device() const = 0;
};

}  // namespace brioche::train
