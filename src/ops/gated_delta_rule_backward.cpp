#include "ops/gated_delta_rule_backward.h"

#include "backend/cpu/gated_delta_rule_backward.h"
#include "core/env_switch.h"
#include "ops/check_f32.h"

namespace brioche::ops {

void gated_delta_rule_backward(const DeltaRuleInputs& in, const DeltaRuleShape& shape,
                               std::span<const RecurrentSequence> sequences, const Tensor& dout,
                               const DeltaRuleGrads& grads, const DeltaRuleStateGrads& states) {
  constexpr const char* op = "gated_delta_rule_backward";
  BRIOCHE_CHECK(
      shape.n_k_heads > 0 && shape.n_v_heads % shape.n_k_heads == 0 && shape.key_dim > 0 && shape.value_dim > 0, op,
      ": expected value heads a multiple of key heads and positive dims, got ", shape.n_v_heads, " value heads, ",
      shape.n_k_heads, " key heads, dims ", shape.key_dim, " and ", shape.value_dim);
  for (Tensor* t : {&grads.dq, &grads.dk, &grads.dv, &grads.dg, &grads.dbeta}) t->note_written();
  auto qs = detail::f32_rows(in.q, op, "q");
  auto ks = detail::f32_rows(in.k, op, "k");
  auto vs = detail::f32_rows(in.v, op, "v");
  auto gs = detail::f32_rows(in.g, op, "g");
  auto bs = detail::f32_rows(in.beta, op, "beta");
  auto ds = detail::f32_rows(dout, op, "dout");
  auto dqs = detail::f32_rows(grads.dq, op, "dq");
  auto dks = detail::f32_rows(grads.dk, op, "dk");
  auto dvs = detail::f32_rows(grads.dv, op, "dv");
  auto dgs = detail::f32_rows(grads.dg, op, "dg");
  auto dbs = detail::f32_rows(grads.dbeta, op, "dbeta");
  const int64_t n = qs.n_rows, key_width = int64_t(shape.n_k_heads) * shape.key_dim,
                value_width = int64_t(shape.n_v_heads) * shape.value_dim;
  auto check = [&](const detail::F32Rows& r, int64_t dim, const Tensor& t, const char* what) {
    BRIOCHE_CHECK(r.n_rows == n && r.dim == dim, op, ": ", what, " must be [", n, ", ", dim, "], got ", t.describe());
  };
  check(qs, key_width, in.q, "q");
  check(ks, key_width, in.k, "k");
  check(vs, value_width, in.v, "v");
  check(gs, shape.n_v_heads, in.g, "g");
  check(bs, shape.n_v_heads, in.beta, "beta");
  check(ds, value_width, dout, "dout");
  check(dqs, key_width, grads.dq, "dq");
  check(dks, key_width, grads.dk, "dk");
  check(dvs, value_width, grads.dv, "dv");
  check(dgs, shape.n_v_heads, grads.dg, "dg");
  check(dbs, shape.n_v_heads, grads.dbeta, "dbeta");
  for (const RecurrentSequence& s : sequences) {
    BRIOCHE_CHECK(s.first_row >= 0 && s.n_rows >= 0 && s.first_row + s.n_rows <= n, op, ": sequence rows [",
                  s.first_row, ", ", s.first_row + s.n_rows, ") outside the batch of ", n);
    BRIOCHE_CHECK(s.starts || states.initial_state != nullptr, op, ": the sequence at row ", s.first_row,
                  " continues a state, and no initial_state was given");
  }
  const int64_t state_floats = int64_t(shape.n_v_heads) * shape.key_dim * shape.value_dim;
  auto state_data = [&](const Tensor* t, const char* what) -> float* {
    if (t == nullptr) return nullptr;
    BRIOCHE_CHECK(
        t->dtype() == DType::F32 && t->is_contiguous() && t->device() == Device::CPU && t->numel() % state_floats == 0,
        op, ": ", what, " must be f32 [n_slots, ", shape.n_v_heads, ", ", shape.key_dim, ", ", shape.value_dim,
        "] contiguous on the CPU, got ", t->describe());
    for (const RecurrentSequence& s : sequences)
      BRIOCHE_CHECK(s.state_slot >= 0 && s.state_slot < t->numel() / state_floats, op, ": ", what, " ", t->describe(),
                    " has no slot ", s.state_slot, " (sequence at row ", s.first_row, ")");
    return t->data_as<float>();
  };
  const float* initial_state = state_data(states.initial_state, "initial_state");
  float* d_initial_state = state_data(states.d_initial_state, "d_initial_state");
  const float* d_final_state = state_data(states.d_final_state, "d_final_state");
  if (states.d_initial_state != nullptr) states.d_initial_state->note_written();
  BRIOCHE_CHECK(detail::common_device(op, {&in.q, &in.k, &in.v, &in.g, &in.beta, &dout, &grads.dq, &grads.dk, &grads.dv,
                                           &grads.dg, &grads.dbeta}) == Device::CPU,
                op, ": runs on the CPU only in this build");
  backend::cpu::gated_delta_rule_backward(
      {.q = qs.data,
       .k = ks.data,
       .v = vs.data,
       .g = gs.data,
       .beta = bs.data,
       .dout = ds.data,
       .dq = dqs.data,
       .dk = dks.data,
       .dv = dvs.data,
       .dg = dgs.data,
       .dbeta = dbs.data,
       .n_rows = n,
       .q_stride = qs.stride,
       .k_stride = ks.stride,
       .v_stride = vs.stride,
       .g_stride = gs.stride,
       .beta_stride = bs.stride,
       .dout_stride = ds.stride,
       .dq_stride = dqs.stride,
       .dk_stride = dks.stride,
       .dv_stride = dvs.stride,
       .dg_stride = dgs.stride,
       .dbeta_stride = dbs.stride,
       .n_k_heads = shape.n_k_heads,
       .n_v_heads = shape.n_v_heads,
       .key_dim = shape.key_dim,
       .value_dim = shape.value_dim,
       .sequences = sequences,
       .initial_state = initial_state,
       .d_initial_state = d_initial_state,
       .d_final_state = d_final_state,
       .chunk_size = env_switch_on("BRIOCHE_CPU_DELTA_RULE_CHUNKED_BACKWARD") ? int(kDeltaRuleChunk) : 1});
}

void delta_rule_gates_backward(const Tensor& a, const Tensor& b, const DeltaRuleGateWeights& w, const Tensor& dg,
                               const Tensor& dbeta, Tensor& da, Tensor& db) {
  constexpr const char* op = "delta_rule_gates_backward";
  da.note_written();
  db.note_written();
  auto as = detail::f32_rows(a, op, "a");
  auto bs = detail::f32_rows(b, op, "b");
  auto ls = detail::f32_rows(w.a_log, op, "a_log");
  auto ts = detail::f32_rows(w.dt_bias, op, "dt_bias");
  auto gs = detail::f32_rows(dg, op, "dg");
  auto betas = detail::f32_rows(dbeta, op, "dbeta");
  auto das = detail::f32_rows(da, op, "da");
  auto dbs = detail::f32_rows(db, op, "db");
  for (const detail::F32Rows* r : {&bs, &gs, &betas, &das, &dbs})
    BRIOCHE_CHECK(r->n_rows == as.n_rows && r->dim == as.dim, op, ": a ", a.describe(), ", b ", b.describe(), ", dg ",
                  dg.describe(), ", dbeta ", dbeta.describe(), ", da ", da.describe(), " and db ", db.describe(),
                  " must have one shape");
  BRIOCHE_CHECK(ls.n_rows == 1 && ls.dim == as.dim && ts.n_rows == 1 && ts.dim == as.dim, op, ": a_log ",
                w.a_log.describe(), " and dt_bias ", w.dt_bias.describe(), " must be [", as.dim, "]");
  BRIOCHE_CHECK(detail::common_device(op, {&a, &b, &w.a_log, &w.dt_bias, &dg, &dbeta, &da, &db}) == Device::CPU, op,
                ": runs on the CPU only in this build");
  backend::cpu::delta_rule_gates_backward({.a = as.data,
                                           .b = bs.data,
                                           .a_log = ls.data,
                                           .dt_bias = ts.data,
                                           .dg = gs.data,
                                           .dbeta = betas.data,
                                           .da = das.data,
                                           .db = dbs.data,
                                           .n_rows = as.n_rows,
                                           .n_heads = as.dim,
                                           .a_stride = as.stride,
                                           .b_stride = bs.stride,
                                           .dg_stride = gs.stride,
                                           .dbeta_stride = betas.stride,
                                           .da_stride = das.stride,
                                           .db_stride = dbs.stride});
}

}  // namespace brioche::ops
