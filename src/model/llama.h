// The Llama-family model (see llama.cpp for the architecture).
#pragma once

#include <vector>

#include "model/blocks.h"
#include "model/decode_graphs.h"
#include "model/model.h"
#include "model/weights.h"

namespace brioche::model {

// Not reentrant: forward reuses activation buffers (one engine thread owns a model).
class LlamaModel final : public Model {
 public:
  explicit LlamaModel(Checkpoint checkpoint);

  const ModelConfig& config() const override { return ck_.config; }
  const formats::GgufFile* gguf() const override;
  std::string directory() const override { return ck_.directory; }
  std::string chat_template() const override { return ck_.chat_template; }
  void forward(const ForwardBatch& batch, KvCache& cache, Tensor& logits) override;
  bool forward_from_device_tokens(const ForwardBatch& batch, const Tensor& tokens, KvCache& cache,
                                  Tensor& logits) override;
  size_t weight_bytes() const override;
  Device device() const override { return ck_.weights.token_embd.device(); }
  // Decode graphs recorded so far (CUDA; see decode_graphs.h).
  size_t n_decode_graphs() const { return graphs_.n_graphs(); }
  // Tensor parallelism: the checkpoint is this rank's shard
  // (model/tensor_parallel.h) and every attention and MLP block all-reduces
  // its partial output through `collective` (not owned; null: one rank).
  // Changing it drops the decode graphs (they recorded the old one's calls):
  // set it to null before destroying a collective the graphs used.
  void set_collective(ops::Collective* collective);

 private:
  void check_batch(const ForwardBatch& batch, const KvCache& cache) const;
  // Makes `logits` f32 [n_logits, vocab] (kept when it already is), on its
  // own device (the host's when undefined).
  void shape_logits(int64_t n_logits, Tensor& logits) const;
  // The forward proper; `logits` [n_logit_rows, vocab] on the model's device.
  // `adapters`: the batch's adapter table on the device (a decode graph's);
  // when null, a CUDA batch with adapter rows uploads its own.
  void forward_on_device(const ForwardBatch& batch, KvCache& cache, Activations& a, Tensor& logits,
                         const AdapterTable* adapters = nullptr);
  // The batch's adapter rows, one segment per run of rows with one adapter.
  std::vector<AdapterRows> adapter_segments(const ForwardBatch& batch) const;
  // lora_u_ grown to the batch's rows and largest adapter rank.
  Tensor& lora_scratch(const ForwardBatch& batch, int64_t n_rows);
  // The batch's adapter table uploaded to lora_table_ (CUDA, outside graphs).
  AdapterTable upload_adapter_table(const ForwardBatch& batch);

  Checkpoint ck_;
  std::vector<float> inv_freq_;  // [head_dim/2] RoPE frequencies, scaling applied
  ActivationBuffers buffers_;
  Tensor device_logits_;             // [n_logits, vocab] on the device, when the caller's logits are on the host
  DecodeGraphs graphs_{ck_.config};  // decode steps on CUDA
  ops::Collective* collective_ = nullptr;
  Tensor lora_u_;                   // [rows, rank] f32 on the device: the adapters' x·Aᵀ (ops::lora_rows_add)
  ops::StagedUpload lora_staging_;  // the adapter table on the host (upload_adapter_table)
  Tensor lora_table_;               // i32 words on the device
  Tensor lora_table_u_;             // f32 [rows, 3 · rank cap]: the table path's u (ops::lora_table_shrink's output)
};

}  // namespace brioche::model
