#include "ops/gated_delta_rule.h"

#include "backend/cpu/gated_delta_rule.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#endif

namespace brioche::ops {

void gated_delta_rule(const DeltaRuleInputs& in, const DeltaRuleShape& shape,
                      std::span<const RecurrentSequence> sequences, Tensor& state, Tensor& out) {
  const auto& [q, k, v, g, beta] = in;
  out.note_written();
  state.note_written();
  BRIOCHE_CHECK(
      shape.n_k_heads > 0 && shape.n_v_heads % shape.n_k_heads == 0 && shape.key_dim > 0 && shape.value_dim > 0,
      "gated_delta_rule: expected value heads a multiple of key heads and positive dims, got ", shape.n_v_heads,
      " value heads, ", shape.n_k_heads, " key heads, dims ", shape.key_dim, " and ", shape.value_dim);
  auto qs = detail::f32_rows(q, "gated_delta_rule", "q");
  auto ks = detail::f32_rows(k, "gated_delta_rule", "k");
  auto vs = detail::f32_rows(v, "gated_delta_rule", "v");
  auto gs = detail::f32_rows(g, "gated_delta_rule", "g");
  auto bs = detail::f32_rows(beta, "gated_delta_rule", "beta");
  auto os = detail::f32_rows(out, "gated_delta_rule", "out");
  const int64_t n = qs.n_rows, key_width = int64_t(shape.n_k_heads) * shape.key_dim,
                value_width = int64_t(shape.n_v_heads) * shape.value_dim;
  auto check = [&](const detail::F32Rows& r, int64_t dim, const Tensor& t, const char* what) {
    BRIOCHE_CHECK(r.n_rows == n && r.dim == dim, "gated_delta_rule: ", what, " must be [", n, ", ", dim, "], got ",
                  t.describe());
  };
  check(qs, key_width, q, "q");
  check(ks, key_width, k, "k");
  check(vs, value_width, v, "v");
  check(gs, shape.n_v_heads, g, "g");
  check(bs, shape.n_v_heads, beta, "beta");
  check(os, value_width, out, "out");
  BRIOCHE_CHECK(state.defined() && state.dtype() == DType::F32 && state.rank() == 4 && state.is_contiguous() &&
                    state.dim(1) == shape.n_v_heads && state.dim(2) == shape.key_dim && state.dim(3) == shape.value_dim,
                "gated_delta_rule: state must be contiguous f32 [slots, ", shape.n_v_heads, ", ", shape.key_dim, ", ",
                shape.value_dim, "], got ", state.defined() ? state.describe() : std::string("undefined"));
  for (const RecurrentSequence& s : sequences) {
    BRIOCHE_CHECK(s.first_row >= 0 && s.n_rows >= 0 && s.first_row + s.n_rows <= n, "gated_delta_rule: sequence rows [",
                  s.first_row, ", ", s.first_row + s.n_rows, ") outside the batch of ", n);
    BRIOCHE_CHECK(s.state_slot >= 0 && s.state_slot < state.dim(0), "gated_delta_rule: state slot ", s.state_slot,
                  " outside [0, ", state.dim(0), ")");
  }
  check_splits_and_checkpoints(sequences, state.dim(0), "gated_delta_rule");
  const backend::cpu::GatedDeltaRuleArgs args{.q = qs.data,
                                              .k = ks.data,
                                              .v = vs.data,
                                              .g = gs.data,
                                              .beta = bs.data,
                                              .state = state.data_as<float>(),
                                              .out = os.data,
                                              .q_stride = qs.stride,
                                              .k_stride = ks.stride,
                                              .v_stride = vs.stride,
                                              .g_stride = gs.stride,
                                              .beta_stride = bs.stride,
                                              .out_stride = os.stride,
                                              .n_k_heads = shape.n_k_heads,
                                              .n_v_heads = shape.n_v_heads,
                                              .key_dim = shape.key_dim,
                                              .value_dim = shape.value_dim,
                                              .sequences = sequences};
  if (detail::common_device("gated_delta_rule", {&q, &k, &v, &g, &beta, &state, &out}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::gated_delta_rule(args);
#else
    detail::fail_no_cuda("gated_delta_rule");
#endif
  }
  backend::cpu::gated_delta_rule(args);
}

void delta_rule_gates(const Tensor& a, const Tensor& b, const DeltaRuleGateWeights& w, Tensor& g, Tensor& beta) {
  const auto& [a_log, dt_bias] = w;
  g.note_written();
  beta.note_written();
  auto as = detail::f32_rows(a, "delta_rule_gates", "a");
  auto bs = detail::f32_rows(b, "delta_rule_gates", "b");
  auto ls = detail::f32_rows(a_log, "delta_rule_gates", "a_log");
  auto ds = detail::f32_rows(dt_bias, "delta_rule_gates", "dt_bias");
  auto gs = detail::f32_rows(g, "delta_rule_gates", "g");
  auto betas = detail::f32_rows(beta, "delta_rule_gates", "beta");
  for (const detail::F32Rows* r : {&bs, &gs, &betas})
    BRIOCHE_CHECK(r->n_rows == as.n_rows && r->dim == as.dim, "delta_rule_gates: a ", a.describe(), ", b ",
                  b.describe(), ", g ", g.describe(), " and beta ", beta.describe(), " must have one shape");
  BRIOCHE_CHECK(ls.n_rows == 1 && ls.dim == as.dim && ds.n_rows == 1 && ds.dim == as.dim, "delta_rule_gates: a_log ",
                a_log.describe(), " and dt_bias ", dt_bias.describe(), " must be [", as.dim, "]");
  const backend::cpu::DeltaRuleGatesArgs args{.a = as.data,
                                              .b = bs.data,
                                              .a_log = ls.data,
                                              .dt_bias = ds.data,
                                              .g = gs.data,
                                              .beta = betas.data,
                                              .n_rows = as.n_rows,
                                              .n_heads = as.dim,
                                              .a_stride = as.stride,
                                              .b_stride = bs.stride,
                                              .g_stride = gs.stride,
                                              .beta_stride = betas.stride};
  if (detail::common_device("delta_rule_gates", {&a, &b, &a_log, &dt_bias, &g, &beta}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::delta_rule_gates(args);
#else
    detail::fail_no_cuda("delta_rule_gates");
#endif
  }
  backend::cpu::delta_rule_gates(args);
}

}  // namespace brioche::ops
