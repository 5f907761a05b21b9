// The Llama-family stack for LoRA training: embedding, frozen layers below
// the adapter, trainable layers (forward saving activations, backward
// accumulating LoRA grads), final norm. The LM head and the loss live apart
// (lm_head.h, losses.h): this class maps tokens to final hidden states and
// hidden-state gradients back to LoRA gradients.
//
// Segmented backward (segment_size > 0): the forward keeps only the residual
// stream at every segment_size-th trainable layer; the backward recomputes
// one segment's activations at a time (same dropout masks: they are a pure
// function of the seed) and walks it backward. Peak activation memory drops
// from all trainable layers to one segment for ~one extra forward.
//
// Offloaded boundaries (and attention outputs) travel on a second stream
// while the layers compute (host_offload.h): to the host during the
// forward, back one segment ahead during the backward.
//
// Device: the model's (its weights'); activations are allocated there and
// every op follows its tensors, so the same code trains on the CPU or CUDA.
#pragma once

#include <memory>
#include <vector>

#include "model/weights.h"
#include "train/host_offload.h"
#include "train/lora.h"
#include "train/token_batch.h"
#include "train/train_layer.h"
#include "train/train_stack.h"

namespace brioche::train {

struct TrainModelOptions {
  int segment_size = 0;  // trainable layers per recompute segment; 0 = keep every layer's activations
  // Keep the segment boundaries in host memory while the model is on the GPU
  // (copied back one segment at a time by the backward): device memory then
  // holds one segment's activations, not also L/segment_size residuals.
  bool offload_boundaries = false;
  // With offload_boundaries: also keep every trainable layer's attention
  // output (and its log-sum-exp) in host memory, so the backward's recompute
  // skips the attention (about 6% of a Llama-3-8B ORPO step at 4,096 tokens
  // per branch) for twice the host memory (16 + 16 KB per token and layer at
  // hidden 4,096, f32).
  bool offload_attention = false;
  // Boundaries stored in bf16 (half the memory, on the device or the host;
  // the recompute then starts from the residual rounded to bf16): the lever
  // for the longest sequences, whose 32 layers of f32 boundaries outgrow
  // host memory (16 KB per token and layer at hidden 4,096).
  DType boundary_dtype = DType::F32;
  // With offload_boundaries: the last this many segments keep their
  // boundaries on the device (spare device memory beside the host's).
  int device_boundaries = 0;
  // The MLP in row chunks of this many rows (LayerContext::mlp_chunk_rows); 0 = whole batch.
  int mlp_chunk_rows = 0;
};

class TrainModel final : public TrainStack {
 public:
  TrainModel(const model::Checkpoint& checkpoint, LoraAdapter* adapter, TrainModelOptions options = {});

  const model::ModelConfig& config() const override { return ck_.config; }
  const model::ModelWeights& weights() const { return ck_.weights; }
  // Layers below this one carry no adapter: their output depends only on the
  // tokens, so callers may cache it (frozen_prefix).
  int first_trainable_layer() const override;

  // Residual stream entering first_trainable_layer(): embedding + frozen layers.  [n_rows, hidden]
  Tensor frozen_prefix(const TokenBatch& batch) const override;

  // From the frozen-prefix output to the final-normed hidden states [n_rows, hidden].
  // With for_backward the batch must stay alive until backward().
  Tensor forward(const TokenBatch& batch, const Tensor& prefix_out, const ForwardOptions& options) override;
  using TrainStack::forward;  // frozen_prefix + forward

  // d_hidden: d loss / d final-normed hidden [n_rows, hidden]. Accumulates
  // LoRA gradients; returns nothing (the embedding is frozen). Taken by
  // value and released after the final norm's backward: a caller that moves
  // it in does not hold [n_rows, hidden] through the layers' backward.
  void backward(Tensor d_hidden) override;

  // With offload_boundaries: the longest batch (rows) the caller will run,
  // so host buffers are pinned once at that size (HostOffload::reserve_rows).
  void reserve_offload_rows(int64_t rows) override { host_.reserve_rows(rows); }

  // Bytes held for the backward after the last forward (activations,
  // boundaries, offloaded attention outputs); 0 after the backward.
  size_t saved_bytes() const override;
  // Of those, bytes in host memory (offloaded boundaries and attention outputs).
  size_t offloaded_bytes() const override;
  Device device() const override { return device_; }

 private:
  LayerContext context(const TokenBatch& batch, const ops::DenseAttentionLayout& layout,
                       const ForwardOptions& options) const;
  LayerParams params(int layer) const;
  // Host slots of trainable layer i's offloaded tensors: its boundary, its attention output and lse.
  static size_t boundary_slot(size_t i) { return 3 * i; }
  static size_t attention_slot(size_t i) { return 3 * i + 1; }
  // Host bytes of the attention outputs the last forward(for_backward) offloaded.
  size_t offloaded_attention_bytes() const;

  const model::Checkpoint& ck_;
  LoraAdapter* adapter_;
  TrainModelOptions options_;
  Device device_ = Device::CPU;
  std::vector<float> inv_freq_;

  // State saved by forward(for_backward) for backward().
  const TokenBatch* batch_ = nullptr;
  ops::DenseAttentionLayout layout_;
  ForwardOptions forward_options_;
  std::vector<LayerCache> caches_;    // per trainable layer (segment_size == 0)
  std::vector<Tensor> boundaries_;    // residual at each segment start (segment_size > 0)
  HostOffload host_;                  // offloaded boundaries (and attention outputs), pinned, reused across steps
  bool attention_offloaded_ = false;  // the last forward(for_backward) put attention outputs in host_
  Tensor x_final_;                    // [n, hidden] before the final norm
};

}  // namespace brioche::train
