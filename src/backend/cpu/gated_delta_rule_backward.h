// CPU kernels of ops::gated_delta_rule_backward and ops::delta_rule_gates_backward
// (see ops/gated_delta_rule_backward.h for the math).
#pragma once

#include <cstdint>
#include <span>

#include "ops/recurrent_sequence.h"

namespace brioche::backend::cpu {

struct GatedDeltaRuleBackwardArgs {
  const float *q, *k, *v, *g, *beta, *dout;  // rows with the strides below (floats)
  float *dq, *dk, *dv, *dg, *dbeta;          // written
  int64_t n_rows;
  int64_t q_stride, k_stride, v_stride, g_stride, beta_stride, dout_stride;
  int64_t dq_stride, dk_stride, dv_stride, dg_stride, dbeta_stride;
  int n_k_heads, n_v_heads, key_dim, value_dim;
  std::span<const ops::RecurrentSequence> sequences;
  // [n_slots, n_v_heads, key_dim, value_dim] per sequence slot, or null:
  // initial_state: the state a sequence that does not start continues from (read);
  // d_initial_state: d loss / d that state (written for those sequences);
  // d_final_state: d loss / d the state after a sequence's last row (read; null: 0).
  const float* initial_state = nullptr;
  float* d_initial_state = nullptr;
  const float* d_final_state = nullptr;
  // Rows per chunk of the chunked backward (chunks align to positions that
  // are multiples of it, as the forward's); 1: the recurrent walk, row by
  // row, with a kept state every checkpoint_rows rows (the reference).
  int chunk_size = ops::kDeltaRuleChunk;
  int checkpoint_rows = 32;
};

void gated_delta_rule_backward(const GatedDeltaRuleBackwardArgs& args);

struct DeltaRuleGatesBackwardArgs {
  const float *a, *b, *a_log, *dt_bias, *dg, *dbeta;
  float *da, *db;
  int64_t n_rows, n_heads, a_stride, b_stride, dg_stride, dbeta_stride, da_stride, db_stride;
};

void delta_rule_gates_backward(const DeltaRuleGatesBackwardArgs& args);

}  // namespace brioche::backend::cpu
