// CPU kernels of the mixture-of-experts block (ops/moe.h).
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

struct MoeRouteArgs {
  const float* logits;            // [n_rows, n_experts], row stride logits_stride floats
  const float* per_expert_scale;  // [n_experts]
  int32_t* expert;                // [n_rows, top_k] out
  float* weight;                  // [n_rows, top_k] out
  int64_t n_rows, logits_stride;
  int n_experts, top_k;
};

void moe_route(const MoeRouteArgs& args);

struct ScaleRowsArgs {
  float* x;            // [n_rows, dim], row stride x_stride floats
  const float* scale;  // [n_rows]
  int64_t n_rows, dim, x_stride;
};

// x[r, :] *= scale[r]
void scale_rows(const ScaleRowsArgs& args);

}  // namespace brioche::backend::cpu
