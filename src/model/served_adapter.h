// A LoRA adapter as the forward applies it, unmerged and per row (many
// adapters and the base model in one batch: ops/lora_rows.h):
//
//   y = x·Wᵀ + (x·Aᵀ)·(s·Bᵀ)     on each projection the adapter targets
//
// The factors live on the model's device in f16 (ops/lora_rows.h says
// why), the scale s folded into bt = s·Bᵀ once. Read from PEFT files by train/adapter_io.h (serving_adapter).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace brioche::model {

// The seven projections of a Llama block, in PEFT's target-module order.
enum class Projection : uint8_t { Q, K, V, O, Gate, Up, Down };
inline constexpr int kProjections = 7;

struct AdapterProjection {
  Tensor a;   // f16 [rank, in]; undefined where the adapter leaves the projection alone
  Tensor bt;  // f16 [rank, out] = s·Bᵀ
};

struct ServedAdapter {
  std::string name;  // the model id requests name it by
  std::string path;  // where it was read from
  uint64_t id = 0;   // unique per load: keys the prefix cache, so rows never share K/V across adapters
  int32_t rank = 0;  // the largest rank over its projections
  std::vector<std::array<AdapterProjection, kProjections>> layers;  // [n_layers]

  const AdapterProjection* projection(int layer, Projection p) const {
    const AdapterProjection& ap = layers[size_t(layer)][size_t(p)];
    return ap.a.defined() ? &ap : nullptr;
  }
  size_t bytes() const {
    size_t n = 0;
    for (const auto& layer : layers)
      for (const AdapterProjection& p : layer) n += p.a.defined() ? p.a.nbytes() + p.bt.nbytes() : 0;
    return n;
  }
};

// A copy whose factors live on `device` (the same tensors when already there).
std::shared_ptr<ServedAdapter> copy_to_device(const ServedAdapter& adapter, Device device);

// Consecutive batch rows that run with one adapter.
struct AdapterRows {
  int32_t first_row = 0, n_rows = 0;
  const ServedAdapter* adapter = nullptr;
};

}  // namespace brioche::model
