// AdamW over f32 parameter tensors on their device, and the squared global
// gradient norm for clipping. Same arithmetic, in the same order, as
// train::AdamW (PyTorch's torch.optim.AdamW, decoupled weight decay):
//   g = grad_scale · grad          (grad_scale: clip factor, 1 when not clipping)
//   p ← p − lr·wd·p
//   m ← β1 m + (1−β1) g;   v ← β2 v + (1−β2) g²
//   p ← p − lr · (m / c1) / (sqrt(v / c2) + ε),   c1 = 1−β1ᵗ, c2 = 1−β2ᵗ
// The gradient is read, not modified.
#pragma once

#include <span>

#include "core/tensor.h"

namespace brioche::ops {

struct AdamWStep {
  float lr = 0.0f;  // base learning rate of this step
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.0f;
  int step = 1;             // t, 1-based (bias corrections)
  float grad_scale = 1.0f;  // multiplies every gradient (global-norm clipping)
};

// One parameter tensor with its gradient and moments: f32, contiguous, all
// the same number of elements and on the same device.
struct AdamWSlot {
  Tensor* param;
  const Tensor* grad;
  Tensor* m;
  Tensor* v;
  float lr_scale = 1.0f;  // LoRA+: lora_plus_ratio on the B factors
};

// Updates every slot (one kernel launch on CUDA for all slots).
void adamw_step(std::span<const AdamWSlot> slots, const AdamWStep& step);

// Σ_t Σ_i t_i² over f32 contiguous tensors of one device, accumulated in f64
// (deterministic order on CUDA: fixed per-block partials, summed in order).
// One device→host copy; sqrt gives the global L2 norm for clipping.
double sum_of_squares(std::span<const Tensor* const> tensors);

}  // namespace brioche::ops
