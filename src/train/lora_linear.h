// One projection with an optional LoRA adapter, forward and backward:
//   y  = x·Wᵀ + b + u·Bᵀ,          u = s · drop(x)·Aᵀ        // u: [n, r], saved
//   dB += dyᵀ·u
//   g   = s · dy·B                                           // [n, r]
//   dA += gᵀ·drop(x)
//   dx (=|+=) dy·W + drop'(g·A)          (W and b are frozen)
#pragma once

#include "core/tensor.h"
#include "ops/linear_backward.h"
#include "train/lora.h"

namespace brioche::train {

struct LoraSite {
  const Tensor* weight = nullptr;   // frozen [out, in], any dtype
  const Tensor* bias = nullptr;     // f32 [out] or undefined
  LoraFactors* lora = nullptr;      // nullptr: plain linear (or adapter disabled)
  float scale = 0.0f;
  ops::DropoutMask dropout;
};

// y [n, out] written; u [n, r] written when the site has LoRA (saved for backward).
void lora_linear_forward(const LoraSite& site, const Tensor& x, Tensor& y, Tensor* u);

struct LoraLinearBackward {
  const Tensor& x;   // [n, in] the forward input
  const Tensor& u;   // [n, r]  from the forward (ignored without LoRA)
  const Tensor& dy;  // [n, out]
  Tensor& dx;        // [n, in]
  ops::GradWrite dx_mode = ops::GradWrite::Overwrite;
};
void lora_linear_backward(const LoraSite& site, const LoraLinearBackward& args);

}  // namespace brioche::train
