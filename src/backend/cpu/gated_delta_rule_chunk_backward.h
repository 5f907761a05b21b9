// The chunked backward of the gated delta rule for one (sequence, value
// head), used by backend::cpu::gated_delta_rule_backward (math in the .cpp).
#pragma once

#include <vector>

#include "backend/cpu/gated_delta_rule_backward.h"

namespace brioche::backend::cpu::detail {

// The rows' q̂ = l2norm(q)/√dk and k̂ = l2norm(k) per key head, and the
// inverse norms r = (Σx² + 1e-6)^−½ the norms' backward needs.
struct NormedKeys {
  std::vector<float> q, k;    // [n_rows, n_k_heads·dk]
  std::vector<float> rq, rk;  // [n_rows, n_k_heads]
};

// dq̂ and dk̂ of value head h land in its columns of dqh / dkh
// ([n_rows, n_v_heads·dk], written for the sequence's rows); dv, dg, dβ in
// its columns of args' outputs; the initial state's gradient, for a
// sequence that does not start, in args.d_initial_state.
// (Its products in the widest lanes the CPU runs: cpu::active_isa().)
void chunked_head_backward(const GatedDeltaRuleBackwardArgs& args, const NormedKeys& normed, int h,
                           const ops::RecurrentSequence& seq, float* dqh, float* dkh);
// The same with AVX-512 products (gated_delta_rule_chunk_backward_avx512.cpp).
void chunked_head_backward_avx512(const GatedDeltaRuleBackwardArgs& args, const NormedKeys& normed, int h,
                                  const ops::RecurrentSequence& seq, float* dqh, float* dkh);

}  // namespace brioche::backend::cpu::detail
