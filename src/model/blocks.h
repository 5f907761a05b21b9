// Shared transformer blocks of the Llama family, composed by llama.cpp.
//
// Every block normalizes the residual stream a.x with its RMSNorm (fused into
// its first matmuls where the device can; a.h receives the normed stream
// where it is materialised) and adds its output to a.x (fused into the last
// matmul where the device can; a.out is scratch). Buffers are [n_rows, ...]
// f32.
#pragma once

#include <span>

#include "core/tensor.h"
#include "model/adapter_table.h"
#include "model/model_config.h"
#include "model/served_adapter.h"
#include "model/weights.h"
#include "ops/attention.h"
#include "ops/collective.h"

namespace brioche::model {

// Activations of one forward, views of length n_rows into reusable buffers.
struct Activations {
  Tensor x;         // [n, hidden]   residual stream
  Tensor h;         // [n, hidden]   normed block input
  Tensor q;         // [n, q_dim]    (q, k, v: column ranges of one buffer
  Tensor k, v;      // [n, kv_dim]    unless the config has qk_norm)
  Tensor attn;      // [n, q_dim]    attention output before o_proj
  Tensor out;       // [n, hidden]   block output
  Tensor gate, up;  // [n, inter]
};

// Owns the activation memory; grows to the largest batch seen.
class ActivationBuffers {
 public:
  Activations view(const ModelConfig& config, int64_t n_rows, Device device = Device::CPU);

 private:
  int64_t capacity_ = 0;
  Device device_ = Device::CPU;
  Activations full_;
};

// What every block of one forward shares: the model's config, the batch's
// positions and sequences, and how blocks run (tensor parallelism, the norm
// handoff).
struct BlockContext {
  const ModelConfig& config;
  std::span<const int32_t> positions;  // [n_rows]
  std::span<const ops::AttentionSequence> sequences;
  std::span<const float> inv_freq;  // [head_dim/2] RoPE frequencies
  // Tensor parallelism: the weights are this rank's shard and the block's
  // output a partial sum over ranks (model/tensor_parallel.h).
  ops::Collective* collective = nullptr;
  // The decode step's norm handoff (ops/norm_handoff.h): the block's first
  // matmul reads its norm from it, its last answers its request for a.x.
  ops::NormHandoff* norm_handoff = nullptr;
};

// One layer's paged K/V cache: [n_blocks, block_size, n_kv_heads, head_dim].
struct LayerKvCache {
  Tensor& k;
  Tensor& v;
};

// The adapters of one layer's rows. With none (the default) the blocks run
// the base model's fused ops; with any, the rows of each adapter add their
// low-rank term to every projection's output, before the bias or the SwiGLU
// that follow (o and down add theirs to the residual). On the CPU every
// projection runs as its own matmul over the materialised input and the
// terms come per run of rows after it (ops::lora_rows_add); on CUDA from the
// batch's adapter table on the device, which a decode graph replays with
// any mix: one shrink for Q/K/V and one for gate/up (of x̂, the GEMVs
// keeping their fused norm), and the terms added by the base projection
// itself (ops::LoraTerms: in the streamed decode GEMV, else an expand
// kernel after it).
struct LayerLora {
  int layer = 0;
  std::span<const AdapterRows> rows;    // in row order; empty: no adapter in the batch
  Tensor* u_scratch = nullptr;          // f32 [n, ≥ the largest rank]
  const AdapterTable* table = nullptr;  // CUDA: the batch's adapters as device data (then `rows` is unused)

  bool adapted() const { return !rows.empty() || table != nullptr; }
};

// Pre-normed self-attention: RMSNorm (w.attn_norm), q/k/v projections
// (+bias), optional per-head q/k RMSNorm (Qwen3), RoPE, K/V appended to the
// paged cache, causal GQA attention, output projection.
//   a.x += attention(rms_norm(a.x))
// With ctx.collective, `w` holds this rank's heads: the o_proj output is a
// partial sum, all-reduced in a.out before the residual add (the fused
// accumulate would add the residual once per rank).
void attention_block(const BlockContext& ctx, const LayerWeights& w, const LayerKvCache& cache, Activations& a,
                     const LayerLora& lora = {});

// SwiGLU MLP after RMSNorm (w.ffn_norm): down(silu(gate(h)) · up(h)).
//   a.x += mlp(rms_norm(a.x))
// With ctx.collective, `w` holds this rank's slice of the intermediate size:
// down's output is all-reduced in a.out, then added.
void mlp_block(const BlockContext& ctx, const LayerWeights& w, Activations& a, const LayerLora& lora = {});

}  // namespace brioche::model
