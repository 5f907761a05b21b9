// The Qwen 3.5 text model (see qwen35.cpp for the architecture): hybrid
// Gated DeltaNet / gated attention layers, dense or mixture-of-experts MLPs,
// on the CPU or on CUDA (where its weights are).
#pragma once

#include <initializer_list>
#include <vector>

#include "model/model.h"
#include "model/qwen35_weights.h"
#include "model/served_adapter.h"

namespace brioche::model {

// Not reentrant (one engine thread owns a model). forward needs a KvCache
// with state slots (KvCacheOptions::n_state_slots) on the model's device and
// every sequence of the batch with a slot (SequenceView::state_slot). A
// sequence may name a served LoRA adapter (SequenceView::adapter: unmerged,
// its rows get each adapted projection's low-rank term; many adapters and the
// base in one batch).
class Qwen35Model final : public Model {
 public:
  // Runs where the checkpoint's weights are (move_qwen35_weights).
  explicit Qwen35Model(Qwen35Checkpoint checkpoint);

  const ModelConfig& config() const override { return ck_.config; }
  const formats::GgufFile* gguf() const override { return ck_.gguf.get(); }
  std::string directory() const override { return ck_.directory; }
  std::string chat_template() const override { return ck_.chat_template; }
  void forward(const ForwardBatch& batch, KvCache& cache, Tensor& logits) override;
  size_t weight_bytes() const override;
  Device device() const override { return device_; }
  const Qwen35Config& qwen35_config() const { return ck_.qwen; }

 private:
  void check_batch(const ForwardBatch& batch, const KvCache& cache) const;
  Tensor buffer(std::initializer_list<int64_t> shape) const;  // f32 zeros on the model's device
  void moe_on_device(int layer, const Tensor& h, const Qwen35Layer& w, Tensor& out);
  // out += sigmoid(h·w_sgᵀ)·shared_expert(h), with the served adapters' terms (none without a shared expert).
  void shared_expert(int layer, const Tensor& h, const Qwen35Layer& w, Tensor& out);
  // y += each served adapter's low-rank term of projection p for its rows (x: the projection's input).
  void add_lora(int layer, Projection p, const Tensor& x, Tensor& y);
  // y = expert_e(in) for each expert's rows (in, y [total, hidden]: the routed rows gathered by expert), with
  // the served adapters' expert terms (gate/up, then down: one call each for every expert's adapter rows).
  void routed_experts_with_adapters(int layer, const Qwen35Layer& w, const ExpertRows& rows, const Tensor& in,
                                    Tensor& y);

  Qwen35Checkpoint ck_;
  std::vector<float> inv_freq_;            // [rotary_dim / 2]
  std::vector<float> unit_expert_scales_;  // [n_experts] of 1 (ops::moe_route)
  Device device_ = Device::CPU;
  std::vector<AdapterRows> adapter_rows_;  // this forward's rows that run with a served adapter, in row order
  Tensor lora_u_;                          // f32 [n, the largest rank among them]: their x·Aᵀ
};

// Copies every weight tensor to `device` in its stored dtype (tied
// embeddings stay one tensor); the host copies are released.
void move_qwen35_weights(Qwen35Checkpoint& checkpoint, Device device);

// Model::load's path for a Qwen 3.5 directory (is_qwen35_directory): refuses
// tensor parallelism and merged adapters; honours max_context,
// convert_weights and the device.
std::unique_ptr<Model> load_qwen35_model(const std::string& dir, const LoadOptions& options);

}  // namespace brioche::model
