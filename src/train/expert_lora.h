// LoRA on one expert of a 3-D expert parameter (peft's ParamWrapper: the
// factors of every expert side by side, lora.h's ModuleShape::experts):
//   u  = s·x·A_eᵀ                  [m, r]   (saved)
//   y += u·B_eᵀ                    [m, out]
//   dB_e += dyᵀ·u,  g = s·dy·B_e,  dA_e += gᵀ·x,  dx += g·A_e
// x holds only the rows routed to the expert, so a factor sees exactly the
// tokens that pass through its expert. No dropout: peft refuses it there.
#pragma once

#include "core/tensor.h"
#include "train/lora.h"
#include "train/lora_linear.h"

namespace brioche::train {

struct ExpertLora {
  LoraFactors* factors = nullptr;  // the layer's A [E·r, in], B [out, r·E]
  int expert = 0;
  int n_experts = 1;
  float scale = 0.0f;
};

// Expert `expert` of (sites.layer, m): its factors where the adapter adapts them and is enabled, else none.
ExpertLora expert_site(const LayerSites& sites, Module m, int expert, int n_experts);

// Returns u [m, r]; y [m, out] += u·B_eᵀ.
Tensor expert_lora_forward(const ExpertLora& site, const Tensor& x, Tensor& y);
// dx [m, in] += g·A_e; the factors' gradients accumulate.
void expert_lora_backward(const ExpertLora& site, const Tensor& x, const Tensor& u, const Tensor& dy, Tensor& dx);

}  // namespace brioche::train
