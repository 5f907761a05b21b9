// One projection with an optional LoRA adapter, forward and backward:
//   y  = x·Wᵀ + b + u·Bᵀ,          u = s · drop(x)·Aᵀ        // u: [n, r], saved
//   dB += dyᵀ·u
//   g   = s · dy·B                                           // [n, r]
//   dA += gᵀ·drop(x)
//   dx (=|+=) dy·W + drop'(g·A)          (W and b are frozen)
// Projections that read the same x (Q, K, V; gate and up) go as one group:
// without dropout that is ops::lora_matmul, which on CUDA converts x (and
// each dy) to bf16 once for every product of the group.
#pragma once

#include <span>

#include "core/tensor.h"
#include "ops/linear_backward.h"
#include "train/lora.h"

namespace brioche::train {

struct LoraSite {
  const Tensor* weight = nullptr;  // frozen [out, in], any dtype
  const Tensor* bias = nullptr;    // f32 [out] or undefined
  LoraFactors* lora = nullptr;     // nullptr: plain linear (or adapter disabled)
  float scale = 0.0f;
  ops::DropoutMask dropout;
};

// The sites of one layer in one forward: LoraSite(m, W) carries the
// adapter's factors, scale and dropout mask where the adapter adapts
// (layer, m) and is enabled, else W alone. Architectures with their own
// training stacks (Gemma 4, Qwen 3.5) build their sites with it.
struct LayerSites {
  LoraAdapter* adapter = nullptr;
  int layer = 0;
  bool enabled = true;
  bool lora_dropout = true;  // training forwards: the adapter's dropout; evaluation: none
  uint64_t seed = 0;         // the micro-step's dropout seed
  LoraSite operator()(Module m, const Tensor& weight, const Tensor* bias = nullptr) const;
};
// f32 [n, r] on the CPU for a site with LoRA (its u, saved for the backward), else undefined.
Tensor lora_u_buffer(const LoraSite& site, int64_t n);

// ys[i] [n, out_i] written; us[i] [n, r] written when sites[i] has LoRA
// (saved for backward).
void lora_linear_forward(std::span<const LoraSite> sites, const Tensor& x, std::span<Tensor* const> ys,
                         std::span<Tensor* const> us);
void lora_linear_forward(const LoraSite& site, const Tensor& x, Tensor& y, Tensor* u);

struct LoraLinearBackward {
  const Tensor& x;   // [n, in] the forward input
  const Tensor& u;   // [n, r]  from the forward (ignored without LoRA)
  const Tensor& dy;  // [n, out]
  Tensor& dx;        // [n, in]
  ops::GradWrite dx_mode = ops::GradWrite::Overwrite;
};
// A group shares x and dx: args[0].dx_mode applies to dx, the other sites add.
void lora_linear_backward(std::span<const LoraSite> sites, std::span<const LoraLinearBackward> args);
void lora_linear_backward(const LoraSite& site, const LoraLinearBackward& args);

}  // namespace brioche::train
