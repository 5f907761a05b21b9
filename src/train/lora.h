// LoRA adapter parameters: y = x·Wᵀ + s · (drop(x)·Aᵀ)·Bᵀ on chosen projections.
//
// Factors are f32 "master" weights: A [r, in] (Kaiming-uniform, bound
// 1/sqrt(in), as PEFT initialises), B [out, r] (zeros), so a fresh adapter is
// the identity. s = alpha / r, or alpha / sqrt(r) with rs_lora.
// Dropout acts on the LoRA input only; its mask is a pure function of
// (seed, layer, module, row, column), so every recompute replays it exactly.
//
// Storage: every A factor is a view into one flat f32 buffer, every B into a
// second, and their gradients into two more, so the optimizer, gradient
// clipping, zeroing and host<->device moves touch four buffers, not 2·7·L
// small tensors. The buffers live on the adapter's device (to_device).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "ops/dropout.h"
#include "model/model_config.h"

namespace brioche::train {

// The seven projections of a Llama block, then the five of Qwen 3.5's Gated
// DeltaNet (linear-attention) block, in PEFT's module names, then the MoE
// block's: the experts' fused 3-D parameters (peft's target_parameters
// "experts.gate_up_proj" [E, 2I, hidden] and "experts.down_proj" [E, hidden, I],
// one rank-r A/B pair per expert) and Qwen 3.5's shared-expert gate (a
// Linear [1, hidden]; the shared expert's own projections are Gate/Up/Down).
// A model's LoraShapes give {0, 0} for the projections its layers lack.
enum class Module : uint8_t {
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
  ExpertGateUp,
  ExpertDown,
  SharedExpertGate
};
inline constexpr int kNumModules = 15;
inline constexpr int kLlamaModules = 7;    // Q..Down: the projections served adapters and GGUF LoRA know
inline constexpr int kServedModules = 12;  // Q..LinearOut: the projections an unmerged served adapter applies
std::string_view module_name(Module m);    // "q_proj", ..., "out_proj", "experts.gate_up_proj", ...
std::string_view module_parent(Module m);  // "self_attn", "mlp" or "linear_attn" (Q..LinearOut)
// The experts' 3-D parameters: peft's ParamWrapper (no dropout, per-expert factors).
inline bool is_expert_module(Module m) { return m == Module::ExpertGateUp || m == Module::ExpertDown; }
// Accepts "q_proj" or "q" (short forms of *_proj), "experts.gate_up_proj" / "gate_up_proj",
// "experts.down_proj", "shared_expert_gate".
std::optional<Module> parse_module(std::string_view name);

struct LoraConfig {
  int rank = 8;
  float alpha = 16.0f;  // scale = alpha / rank (or / sqrt(rank) with rs_lora)
  bool rs_lora = false;
  float dropout = 0.0f;
  std::vector<Module> targets = {Module::Q, Module::K, Module::V, Module::O, Module::Gate, Module::Up, Module::Down};
  int num_layers = -1;  // LoRA on the last num_layers layers; -1 = all
  float scale() const;
};

struct LoraFactors {
  Tensor a, b;  // f32 [r, in], [out, r]: views into the adapter's flat buffers
  Tensor grad_a, grad_b;
};

// The adapter's four flat buffers (f32 [n]): all A factors, all B factors, and their gradients.
struct LoraFlat {
  Tensor a, b, grad_a, grad_b;
};

// Input/output features of a projection in a model. experts > 1: a 3-D
// expert parameter, factored as peft's ParamWrapper does it: A [experts·r, in]
// (expert e's A_e is rows e·r .. e·r + r − 1), B [out, r·experts] (B_e[o, j] =
// B[o, j·experts + e]), so expert e's weight is W_e + s·B_e·A_e.
struct ModuleShape {
  int64_t in = 0, out = 0;
  int64_t experts = 1;
};
ModuleShape module_shape(const model::ModelConfig& config, Module m);
// The shape of projection m in a layer; {0, 0} where the layer has no such
// projection (Gemma 4: no k_proj/v_proj in KV-shared layers, no v_proj with
// attention_k_eq_v). Models whose layers differ pass their own; the default
// is module_shape(config, m) for every layer.
using LoraShapes = std::function<ModuleShape(int layer, Module m)>;
LoraShapes uniform_shapes(const model::ModelConfig& config);

class LoraAdapter {
 public:
  // Fresh factors for every targeted module of the last num_layers layers
  // (skipping layers that lack a module: shapes gives {0, 0} there).
  LoraAdapter(const model::ModelConfig& config, const LoraConfig& lora, uint64_t seed, LoraShapes shapes = {});
  // An adapter on exactly the given (layer, module) sites, factors zeroed
  // (a loaded adapter fills them). lora.num_layers is ignored.
  struct Site {
    int layer;
    Module module;
  };
  LoraAdapter(const model::ModelConfig& config, const LoraConfig& lora, const std::vector<Site>& sites,
              LoraShapes shapes = {});

  const LoraConfig& config() const { return config_; }
  const LoraShapes& shapes() const { return shapes_; }
  const model::ModelConfig& model_config() const { return model_config_; }
  float scale() const { return scale_; }
  int n_layers() const { return int(layers_.size()); }
  int first_adapted_layer() const { return first_layer_; }
  // nullptr when (layer, module) has no adapter.
  LoraFactors* factors(int layer, Module m) { return layers_[size_t(layer)][size_t(m)].get(); }
  const LoraFactors* factors(int layer, Module m) const { return layers_[size_t(layer)][size_t(m)].get(); }

  // Training-time dropout on the LoRA input (e.g. when warm-starting a loaded adapter).
  void set_dropout(float p);
  void zero_grads();

  // Where the factors live; to_device moves all four buffers (the views follow).
  Device device() const { return flat_.a.device(); }
  void to_device(Device device);
  // A CPU copy with the same sites and values (for saving a device adapter).
  std::unique_ptr<LoraAdapter> host_copy() const;
  LoraFlat& flat() { return flat_; }
  const LoraFlat& flat() const { return flat_; }

  int64_t parameter_count() const;
  // Every factor with its PEFT-style name suffix ("layers.3.self_attn.q_proj"), in a fixed order.
  struct Entry {
    int layer;
    Module module;
    LoraFactors* factors;
  };
  std::vector<Entry> entries();

 private:
  // Allocates the flat buffers on the CPU for `sites` (zeros) and points the factors into them.
  void allocate(const model::ModelConfig& config, const std::vector<Site>& sites);
  void bind_views();
  // peft's ParamWrapper refuses dropout: so does an adapter on the experts.
  void check_expert_dropout(const std::vector<Site>& sites, float p) const;

  LoraConfig config_;
  float scale_;
  int first_layer_;
  model::ModelConfig model_config_;
  LoraShapes shapes_;
  std::vector<std::array<std::unique_ptr<LoraFactors>, kNumModules>> layers_;
  LoraFlat flat_;
};

// Inverted dropout on the LoRA input of (layer, module) in the micro-step
// with `step_seed`: keep with probability 1 − p, scale kept values by
// 1/(1 − p); applied with ops::dropout, whose mask is a pure hash of the
// key, so forward and recompute agree without storing it.
ops::DropoutMask lora_dropout_mask(float p, uint64_t step_seed, int layer, Module m);

}  // namespace brioche::train
