// Gemma 4's text model (see gemma4.cpp for the architecture), on the CPU or
// on CUDA (weights, scratch and the KV cache on the model's device).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/gemma4_weights.h"
#include "model/model.h"
#include "model/served_adapter.h"
#include "ops/attention.h"

namespace brioche::ops {
struct MoeRouting;
}

namespace brioche::model {

// Not reentrant: forward reuses its scratch buffers (one engine thread owns a model).
class Gemma4Model final : public Model {
 public:
  explicit Gemma4Model(Gemma4Checkpoint checkpoint);

  const ModelConfig& config() const override { return ck_.config.base; }
  const Gemma4Config& gemma4_config() const { return ck_.config; }
  const formats::GgufFile* gguf() const override { return ck_.gguf.get(); }
  std::string directory() const override { return ck_.directory; }
  std::string chat_template() const override { return ck_.chat_template; }
  void forward(const ForwardBatch& batch, KvCache& cache, Tensor& logits) override;
  Device device() const override { return device_; }
  size_t weight_bytes() const override;

 private:
  // Scratch of one role: a flat f32 buffer on the model's device viewed as
  // [rows, width], grown to the largest batch seen (widths differ by layer).
  struct Scratch {
    Tensor flat;
    Device device = Device::CPU;
    Tensor rows(int64_t n, int64_t width);
  };
  struct Buffers {
    Scratch x, h, q, k, v, attn, out, gate, up;  // residual stream, normed input, attention, MLP
    Scratch ple, ple_tok, ple_gate;              // per-layer inputs
    Scratch router, moe_in, moe_out, expert_in, expert_gate_up, expert_act, expert_out;  // MoE
    Scratch last;                                                                        // rows that want logits
    Scratch lora_u;                                                                      // served adapters' x·Aᵀ
    Scratch logits;  // the head's output on the device when the caller wants it on the host
  };

  void check_batch(const ForwardBatch& batch, const KvCache& cache) const;
  // The forward on the model's device, logits there too ([n_logit_rows, vocab]).
  void forward_on_device(const ForwardBatch& batch, KvCache& cache, Tensor& logits);
  // `sequences` address the main blocks, `window_sequences` the window pool
  // (the layers KvCache::windowed; empty when the cache has none).
  void attention(int layer, const ForwardBatch& batch, std::span<const ops::AttentionSequence> sequences,
                 std::span<const ops::AttentionSequence> window_sequences, KvCache& cache, Tensor& x);
  void mlp(int layer, Tensor& x);
  // The MoE block's expert half: out = Σ_k weight_k · expert_k(rms_norm(x)).
  void experts(int layer, const Tensor& x, Tensor& out);
  // experts() for a batch with served adapters that adapt this layer's experts: the routed rows gathered by
  // expert once, each expert's matmuls on its rows, then each part's low-rank terms for every expert's adapter
  // rows in one call (ExpertRows); out = Σ_k weight_k · y (routed: the experts' normed input).
  void experts_with_adapters(int layer, const Tensor& routed, const ops::MoeRouting& route, Tensor& out);
  // y += each served adapter's low-rank term of projection p for its rows (x: the projection's input).
  void add_lora(int layer, Projection p, const Tensor& x, Tensor& y);
  // (proj(x)·hidden^−½ normed per layer + √P·embed_per_layer(tokens))·2^−½: [n, L·P]
  Tensor per_layer_inputs(const ForwardBatch& batch, const Tensor& x);

  Gemma4Checkpoint ck_;
  Device device_ = Device::CPU;               // where the weights live (the load's LoadOptions::device)
  std::vector<std::vector<float>> inv_freq_;  // per layer, [head_dim/2]
  Buffers buf_;
  std::vector<AdapterRows> adapter_rows_;  // this forward's rows that run with a served adapter
  int32_t adapter_rank_ = 0;               // the largest rank among them
};

// Model::load for a Gemma 4 directory: refuses what this build cannot run
// (tensor parallelism) with a one-line error; with a device other than the
// CPU, uploads every weight (move_gemma4_weights); merges an
// adapter at load through options.adjust_gemma4_checkpoint; says in one line when a multimodal checkpoint's text model
// is all that is loaded.
std::unique_ptr<Model> load_gemma4_model(const std::string& dir, const LoadOptions& options);

// Copies every tensor of `weights` to `device` in its stored dtype (tied
// embeddings stay one tensor); the host copies are released.
void move_gemma4_weights(Gemma4Weights& weights, bool tied_embeddings, Device device);

}  // namespace brioche::model
