// CPU kernels of the fused log-prob head's per-chunk steps (ops/logp_head.h
// has the math); the chunk GEMMs go through ops::matmul.
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

struct LogpChunk {
  float* z;  // [n, width] logits of vocabulary rows [v0, v0 + width), row stride ldz
  int64_t ldz, n, width, v0;
  const int32_t* targets;  // [n]
};

// Online log-sum-exp over one chunk: run_max, run_sum [n] updated;
// target_logit[i] set when t_i falls in the chunk.
void logp_chunk_update(const LogpChunk& chunk, float* run_max, float* run_sum, float* target_logit);

// In place: z_iv ← d_logp_i · (1[v = t_i] − e^{z_iv − lse_i}).
void logp_chunk_grad(const LogpChunk& chunk, const float* lse, const float* d_logp);

}  // namespace brioche::backend::cpu
