// The routing of a mixture-of-experts block (Gemma 4's router) and the
// per-row weighting of expert outputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace brioche::ops {

// For each row: probabilities p = softmax(logits), the top_k experts by p
// (ties: the lower index first), their weights p_e / Σ_topk p · per_expert_scale[e].
struct MoeRouting {
  int top_k = 0;
  std::vector<int32_t> expert;  // [n_rows * top_k], row-major, best first
  std::vector<float> weight;    // [n_rows * top_k]
};

// logits : f32 [n_rows, n_experts] on the CPU; per_expert_scale [n_experts].
MoeRouting moe_route(const Tensor& logits, int top_k, std::span<const float> per_expert_scale);

// x[r, :] *= scale[r]    x : f32 [n_rows, dim] on the CPU; scale [n_rows]
void scale_rows(Tensor& x, std::span<const float> scale);

}  // namespace brioche::ops
