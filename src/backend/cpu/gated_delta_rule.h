// CPU kernels of ops::gated_delta_rule and ops::delta_rule_gates (see
// ops/gated_delta_rule.h for the math).
#pragma once

#include <cstdint>
#include <span>

#include "ops/recurrent_sequence.h"

namespace brioche::backend::cpu {

struct GatedDeltaRuleArgs {
  const float *q, *k, *v, *g, *beta;  // rows with the strides below (floats)
  float* state;                       // [n_slots, n_v_heads, key_dim, value_dim]
  float* out;                         // [n_rows, n_v_heads * value_dim]
  int64_t q_stride, k_stride, v_stride, g_stride, beta_stride, out_stride;
  int n_k_heads, n_v_heads, key_dim, value_dim;
  std::span<const ops::RecurrentSequence> sequences;
  // Rows per chunk of the chunked form (chunks align to positions that are
  // multiples of it); 1: the recurrent form for every row.
  int chunk_size = ops::kDeltaRuleChunk;
};

void gated_delta_rule(const GatedDeltaRuleArgs& args);

struct DeltaRuleGatesArgs {
  const float *a, *b, *a_log, *dt_bias;
  float *g, *beta;
  int64_t n_rows, n_heads, a_stride, b_stride, g_stride, beta_stride;
};

void delta_rule_gates(const DeltaRuleGatesArgs& args);

}  // namespace brioche::backend::cpu
