// Gemma 4's text model (see gemma4.cpp for the architecture), on the CPU or
// on CUDA (weights, scratch and the KV cache on the model's device).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/adapter_table.h"
#include "model/decode_graphs.h"
#include "model/gemma4_weights.h"
#include "model/model.h"
#include "model/served_adapter.h"
#include "ops/attention.h"
#include "ops/device.h"

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
  bool forward_from_device_tokens(const ForwardBatch& batch, const Tensor& tokens, KvCache& cache,
                                  Tensor& logits) override;
  Device device() const override { return device_; }
  size_t weight_bytes() const override;
  // Decode graphs recorded so far (CUDA; see decode_graphs.h).
  size_t n_decode_graphs() const { return graphs_.n_graphs(); }

 private:
  // Scratch of one role: a flat buffer (f32 unless said) on the model's
  // device viewed as [rows, width], grown to the largest batch seen (widths
  // differ by layer). Made only with its device, so no role can be left on
  // the host by a forgotten assignment.
  struct Scratch {
    explicit Scratch(Device device, DType dtype = DType::F32) : device(device), dtype(dtype) {}
    Tensor flat;
    Device device;
    DType dtype;
    Tensor rows(int64_t n, int64_t width);
  };
  struct Buffers {
    explicit Buffers(Device device) : device(device) {}
    Device device;
    Scratch x{device}, h{device}, q{device}, k{device}, v{device}, attn{device}, out{device}, gate{device},
        up{device};                                          // residual stream, normed input, attention, MLP
    Scratch ple{device}, ple_tok{device}, ple_gate{device};  // per-layer inputs
    Scratch router{device}, moe_in{device}, moe_out{device}, expert_in{device}, expert_gate_up{device},
        expert_act{device}, expert_out{device};                      // MoE
    Scratch route_expert{device, DType::I32}, route_weight{device};  // decode rows' routing on the device (i32 ids)
    Scratch last{device};                                            // rows that want logits
    Scratch lora_u{device};                                          // served adapters' x·Aᵀ
    Scratch lora_table_u{device};  // the adapter table's x·Aᵀ: [rows, 3 · rank cap]
    Scratch logits{device};        // the head's output on the device when the caller wants it on the host
  };

  void check_batch(const ForwardBatch& batch, const KvCache& cache) const;
  // Whether a decode step of `batch` may run as a CUDA graph (graphs_): when
  // its adapters, if any, go through the adapter table (table_takes), and
  // with the MoE block only up to kExpertMatmulRows rows: past them the
  // experts are routed on the host (ops::moe_route reads the router's logits
  // back mid-step), which a graph cannot record.
  bool graphs_take(const ForwardBatch& batch) const;
  // Whether the batch's adapter rows take the adapter table on the device
  // (model/adapter_table.h: any mix in one recorded launch pair per
  // projection): on CUDA, unless an adapter adapts the MoE experts (their
  // terms are added per run of rows, add_adapter_rows, which passes the
  // rows in the launch: a replay would repeat them for any mix).
  bool table_takes(const ForwardBatch& batch) const;
  // The batch's adapter table uploaded (CUDA, outside graphs).
  AdapterTable upload_adapter_table(const ForwardBatch& batch);
  // Whether this forward adds adapter terms (per run of rows or by the table).
  bool adapted() const { return lora_table_ != nullptr || !adapter_rows_.empty(); }
  // graphs_.run with this model's forward, on the scratch of the bucket's rows.
  bool run_graph(const ForwardBatch& batch, KvCache& cache, Tensor& logits, const Tensor* device_tokens);
  // The forward on the model's device, logits there too ([n_logit_rows, vocab]).
  // `adapters`: the batch's adapter table on the device (a decode graph's);
  // when null, a CUDA batch with adapter rows uploads its own (table_takes).
  void forward_on_device(const ForwardBatch& batch, KvCache& cache, Tensor& logits,
                         const AdapterTable* adapters = nullptr);
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
  // The scratch this forward uses: eager_buf_, or a decode graph bucket's
  // own (graph_buf_, by padded row count), whose addresses the graph holds.
  Buffers eager_buf_{device_};
  std::map<int64_t, Buffers> graph_buf_;
  Buffers* buf_ = &eager_buf_;
  DecodeGraphs graphs_{ck_.config.base, /*block_activations=*/false};  // decode steps on CUDA
  std::vector<AdapterRows> adapter_rows_;     // this forward's rows that run with a served adapter
  int32_t adapter_rank_ = 0;                  // the largest rank among them
  const AdapterTable* lora_table_ = nullptr;  // this forward's adapter table (CUDA), when it takes one
  ops::StagedUpload lora_staging_;            // the adapter table on the host (upload_adapter_table)
  Tensor lora_table_block_;                   // i32 words on the device
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
