// AVX-512 row kernels of the fused log-prob head (logp_head_avx512.cpp),
// called by logp_head.cpp where the active instruction set has them.
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

struct LogpRowSums {
  float max;  // max(run_max, max_v z_v)
  float sum;  // Σ_v e^{z_v − max}
};
// One row of a chunk's logits z[0..width) against the running max so far.
LogpRowSums logp_row_sums_avx512(const float* z, int64_t width, float run_max);

// In place: z_v ← −d_logp · e^{z_v − lse}.
void logp_row_grad_avx512(float* z, int64_t width, float d_logp, float lse);

}  // namespace brioche::backend::cpu
