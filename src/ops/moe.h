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

// logits : f32 [n_rows, n_experts] (device logits are read back: the
// routing runs on the host, where the expert loop needs it); per_expert_scale [n_experts].
MoeRouting moe_route(const Tensor& logits, int top_k, std::span<const float> per_expert_scale);

// moe_route for decode rows on their own device, without a wait for the
// host (so a CUDA graph records it): row r's top_k experts in ascending id
// order as pairs [r·top_k, (r + 1)·top_k), with moe_route's weights.
//   logits : f32 [n_rows, n_experts];  per_expert_scale [n_experts] host memory
//   expert : i32 [n_rows·top_k], weight : f32 [n_rows·top_k], on logits' device
constexpr int kMaxRoutePairsTopK = 32;  // experts a row may take in moe_route_pairs
void moe_route_pairs(const Tensor& logits, int top_k, std::span<const float> per_expert_scale, Tensor& expert,
                     Tensor& weight);

// y[p, :] = x[x_rows[p], :] · experts[expert[p]]ᵀ for each (row, expert)
// pair p: the decode path of the MoE experts, which reads only the chosen
// experts' weights, every pair in one launch on CUDA (backend/cuda/moe.cu;
// on the CPU one matmul per pair).
//   x       : f32 [n_x, k]
//   experts : [n_experts, m, k], any weight dtype (rows of a quantized dtype:
//             k a multiple of 32 on CUDA)
//   x_rows, expert : [n_pairs] host memory;  y : f32 [n_pairs, m]; same device as x
void expert_matmul(const Tensor& x, std::span<const int32_t> x_rows, const Tensor& experts,
                   std::span<const int32_t> expert, Tensor& y);

// expert_matmul with the pairs' experts read on x's device: expert i32
// [n_pairs] there (moe_route_pairs' output; its ids are not checked on the host).
void expert_matmul(const Tensor& x, std::span<const int32_t> x_rows, const Tensor& experts, const Tensor& expert,
                   Tensor& y);

// x[r, :] *= scale[r]    x : f32 [n_rows, dim] on its device; scale [n_rows] host memory
void scale_rows(Tensor& x, std::span<const float> scale);
// scale_rows with the scales read on x's device: scale f32 [n_rows] there.
void scale_rows(Tensor& x, const Tensor& scale);

}  // namespace brioche::ops
