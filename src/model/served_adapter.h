// A LoRA adapter as the forward applies it, unmerged and per row (many
// adapters and the base model in one batch: ops/lora_rows.h):
//
//   y = x·Wᵀ + (x·Aᵀ)·(s·Bᵀ)     on each projection the adapter targets
//
// and on a MoE layer's experts (peft's ParamWrapper on experts.gate_up_proj
// and experts.down_proj: A [E·r, in], B [out, r·E], expert e's A_e the rows
// e·r .. e·r + r − 1 of A and B_e[o, j] = B[o, j·E + e], so its weight is
// W_e + s·B_e·A_e; peft's get_delta_weight, einsum "o r e, e r i -> e o i"),
// for the rows routed to expert e only:
//
//   y_e = x·W_eᵀ + (x·A_eᵀ)·(s·B_eᵀ)
//
// The factors live on the model's device in f16 (ops/lora_rows.h says
// why), the scale s folded into bt = s·Bᵀ once. Read from PEFT files by train/adapter_io.h (serving_adapter).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace brioche::model {

class Model;

// The projections an adapter may target, in PEFT's target-module order
// (train::Module's): a Llama block's seven, then the Gated DeltaNet's five
// (Qwen 3.5's linear-attention layers: in_proj_qkv, in_proj_z, in_proj_b,
// in_proj_a, out_proj), then Qwen 3.5 MoE's shared_expert_gate ([1, hidden]).
// On a Qwen 3.5 MoE layer Gate/Up/Down are its shared expert's (peft's
// mlp.shared_expert.gate_proj...); the routed experts' factors are apart
// (ServedAdapter::experts).
enum class Projection : uint8_t {
  Q,
  K,
  V,
  O,
  Gate,
  Up,
  Down,
  LinearQkv,
  LinearZ,
  LinearB,
  LinearA,
  LinearOut,
  SharedExpertGate
};
inline constexpr int kProjections = 13;
// The Llama block's seven (Q..Down): what model/blocks.h applies and the
// CUDA adapter table holds per layer (model/adapter_table.h).
inline constexpr int kBlockProjections = 7;
// peft's module name: "q_proj", ..., "down_proj", "in_proj_qkv", ..., "out_proj", "shared_expert_gate".
std::string_view projection_name(Projection p);

struct AdapterProjection {
  Tensor a;   // f16 [rank, in]; undefined where the adapter leaves the projection alone
  Tensor bt;  // f16 [rank, out] = s·Bᵀ
  // (or both Q8_0 by block column, [in / 32, rank · 32] and [out / 32, rank · 32]: with_q8_0_factors)
  int64_t in_features() const { return a.dtype() == DType::Q8_0 ? a.dim(0) * 32 : a.dim(1); }
  int64_t out_features() const { return bt.dtype() == DType::Q8_0 ? bt.dim(0) * 32 : bt.dim(1); }
};

// One expert's factors. gate_up's s·B_eᵀ [r, 2I] is kept as its gate
// columns and its up columns (peft's gate_up_proj delta is the gate rows,
// then the up rows), both with A_e (one tensor), so experts that compute
// gate and up apart (Qwen 3.5) and side by side (Gemma 4) take them alike.
struct AdapterExpert {
  AdapterProjection gate, up;  // experts.gate_up_proj; undefined where the adapter leaves it alone
  AdapterProjection down;      // experts.down_proj; likewise
};

struct ServedAdapter {
  std::string name;  // the model id requests name it by
  std::string path;  // where it was read from
  uint64_t id = 0;   // unique per load: keys the prefix cache, so rows never share K/V across adapters
  int32_t rank = 0;  // the largest rank over its projections
  std::vector<std::array<AdapterProjection, kProjections>> layers;  // [n_layers]
  // [n_layers][n_experts]: the MoE experts' factors; a layer's list is empty
  // where the adapter adapts neither expert parameter there.
  std::vector<std::vector<AdapterExpert>> experts;

  const AdapterProjection* projection(int layer, Projection p) const {
    const AdapterProjection& ap = layers[size_t(layer)][size_t(p)];
    return ap.a.defined() ? &ap : nullptr;
  }
  bool adapts_experts(int layer) const { return size_t(layer) < experts.size() && !experts[size_t(layer)].empty(); }
  size_t bytes() const;
};

// A copy whose factors live on `device` (the same tensors when already there).
std::shared_ptr<ServedAdapter> copy_to_device(const ServedAdapter& adapter, Device device);

// Whether `model` serves its adapters' factors in Q8_0 (with_q8_0_factors):
// on the CPU, where its projections are quantized as its GGUF stores them
// (weights_converted: --weights-dtype converted them at load). A decode step
// reads every factor of the batch's adapters from memory, so halving their
// bytes pays; Q8_0's rounding of the low-rank term (~0.4% of it) is far
// below what the base's 4- or 8-bit weights and 8-bit activations round.
// Models in f32, f16 or bf16 keep f16 factors.
bool serves_q8_0_factors(const Model& model, bool weights_converted);

// A copy with every factor in Q8_0 by block column (ops::lora_factor_q8_0;
// a projection whose factor rows are not whole blocks of 32 stays f16).
// CPU factors only.
std::shared_ptr<ServedAdapter> with_q8_0_factors(const ServedAdapter& adapter);

// Consecutive batch rows that run with one adapter.
struct AdapterRows {
  int32_t first_row = 0, n_rows = 0;
  const ServedAdapter* adapter = nullptr;
};

// One projection of one layer.
struct AdapterSite {
  int layer = 0;
  Projection projection = Projection::Q;
};

// A MoE layer's routed rows gathered by expert: expert e's are rows
// [expert_first[e], expert_first[e + 1]) of the experts' inputs and outputs,
// and row i is batch row batch_rows[i] (ascending within an expert).
struct ExpertRows {
  int layer = 0;
  std::span<const int32_t> batch_rows;    // [total]
  std::span<const int64_t> expert_first;  // [n_experts + 1]: the model's expert count, which an adapter's must match
};

// Whether any of `rows`' adapters adapts layer's experts (else the MoE block
// runs as the base's, fused paths included).
bool any_adapts_experts(std::span<const AdapterRows> rows, int layer);

// y_e += (x·A_eᵀ)·(s·B_eᵀ) of `part` (Down, or Gate / Up: experts.gate_up_proj's
// columns) for every expert's rows whose batch row belongs to an adapter that
// adapts it, in one ops::lora_rows_add (a segment per expert and adapter
// run); the rest keep y. x [total, in], y [total, out] (a column view is
// fine), u_scratch f32 [≥ total, ≥ the largest rank]. An adapter with
// another expert count or factors of another shape fails naming the
// parameter, the layer and the expert.
void add_expert_adapter_rows(std::span<const AdapterRows> rows, const ExpertRows& experts, Projection part,
                             const Tensor& x, Tensor& y, Tensor& u_scratch);
// The gate's and the up's terms (one x) in one ops::lora_rows_add_group.
void add_expert_gate_up_adapter_rows(std::span<const AdapterRows> rows, const ExpertRows& experts, const Tensor& x,
                                     Tensor& gate, Tensor& up, Tensor& u_scratch);

// y += (x·Aᵀ)·(s·Bᵀ) of `site` for the rows of each adapter that targets it
// (ops::lora_rows_add: one shrink and one expand whatever the mix; rows of
// the base and of adapters that leave the projection alone keep y). x [n, in]
// is the projection's input, y [n, out] its output, u_scratch f32
// [n, ≥ the largest rank]. A factor of another shape fails naming the
// projection and the layer (an adapter for another model).
void add_adapter_rows(std::span<const AdapterRows> rows, AdapterSite site, const Tensor& x, Tensor& y,
                      Tensor& u_scratch);

}  // namespace brioche::model
