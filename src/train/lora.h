// LoRA adapter parameters: y = x·Wᵀ + s · (drop(x)·Aᵀ)·Bᵀ on chosen projections.
//
// Factors are f32 "master" weights: A [r, in] (Kaiming-uniform, bound
// 1/sqrt(in), as PEFT initialises), B [out, r] (zeros), so a fresh adapter is
// the identity. s = alpha / r, or alpha / sqrt(r) with rs_lora.
// Dropout acts on the LoRA input only; its mask is a pure function of
// (seed, layer, module, row, column), so every recompute replays it exactly.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "model/model_config.h"

namespace brioche::train {

// The seven projections of a Llama block, in PEFT's module names.
enum class Module : uint8_t { Q, K, V, O, Gate, Up, Down };
inline constexpr int kNumModules = 7;
std::string_view module_name(Module m);                   // "q_proj", ..., "down_proj"
std::string_view module_parent(Module m);                 // "self_attn" or "mlp"
std::optional<Module> parse_module(std::string_view name);  // accepts "q_proj" or "q"

struct LoraConfig {
  int rank = 8;
  float alpha = 16.0f;           // scale = alpha / rank (or / sqrt(rank) with rs_lora)
  bool rs_lora = false;
  float dropout = 0.0f;
  std::vector<Module> targets = {Module::Q, Module::K, Module::V, Module::O, Module::Gate, Module::Up, Module::Down};
  int num_layers = -1;           // LoRA on the last num_layers layers; -1 = all
  float scale() const;
};

struct LoraFactors {
  Tensor a, b;        // f32 [r, in], [out, r]
  Tensor grad_a, grad_b;
};

// Input/output features of a projection in a model.
struct ModuleShape {
  int64_t in = 0, out = 0;
};
ModuleShape module_shape(const model::ModelConfig& config, Module m);

class LoraAdapter {
 public:
  // Fresh factors for every targeted module of the last num_layers layers.
  LoraAdapter(const model::ModelConfig& config, const LoraConfig& lora, uint64_t seed);
  // An adapter on exactly the given (layer, module) sites, factors zeroed
  // (a loaded adapter fills them). lora.num_layers is ignored.
  struct Site {
    int layer;
    Module module;
  };
  LoraAdapter(const model::ModelConfig& config, const LoraConfig& lora, const std::vector<Site>& sites);

  const LoraConfig& config() const { return config_; }
  float scale() const { return scale_; }
  int n_layers() const { return int(layers_.size()); }
  int first_adapted_layer() const { return first_layer_; }
  // nullptr when (layer, module) has no adapter.
  LoraFactors* factors(int layer, Module m) { return layers_[size_t(layer)][size_t(m)].get(); }
  const LoraFactors* factors(int layer, Module m) const { return layers_[size_t(layer)][size_t(m)].get(); }

  // Training-time dropout on the LoRA input (e.g. when warm-starting a loaded adapter).
  void set_dropout(float p);
  void zero_grads();
  int64_t parameter_count() const;
  // Every factor with its PEFT-style name suffix ("layers.3.self_attn.q_proj"), in a fixed order.
  struct Entry {
    int layer;
    Module module;
    LoraFactors* factors;
  };
  std::vector<Entry> entries();

 private:
  LoraConfig config_;
  float scale_;
  int first_layer_;
  std::vector<std::array<std::unique_ptr<LoraFactors>, kNumModules>> layers_;
};

// Inverted dropout on the LoRA input: keep with probability 1 − p, scale
// kept values by 1/(1 − p). The mask of element (row, col) is a hash of the
// stream key, so forward and recompute agree without storing it.
struct DropoutStream {
  float p = 0.0f;
  uint64_t key = 0;  // mix of (step seed, layer, module)
  bool active() const { return p > 0.0f; }
  // Multiplier (0 or 1/(1−p)) of element (row, col).
  float factor(int64_t row, int64_t col) const;
  static DropoutStream make(float p, uint64_t step_seed, int layer, Module m);
};

// dst[n, k] = src ⊙ mask (the dropped LoRA input)
void apply_dropout(const DropoutStream& d, const Tensor& src, Tensor& dst);

}  // namespace brioche::train
