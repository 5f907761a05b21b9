#include "ops/attention_backward.h"

#include "backend/cpu/attention_backward.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/attention_train.h"
#endif

namespace brioche::ops {

namespace {

void check_layout(const DenseAttentionLayout& layout, const DenseAttentionParams& p, int64_t n_rows) {
  BRIOCHE_CHECK(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0 && p.head_dim > 0,
                "dense_attention: n_heads ", p.n_heads, " must be a positive multiple of n_kv_heads ", p.n_kv_heads);
  for (const auto& s : layout.spans) {
    BRIOCHE_CHECK(s.first_row >= 0 && s.n_rows >= 0 && s.first_row + s.n_rows <= n_rows, "dense_attention: span [",
                  s.first_row, ", ", s.first_row + s.n_rows, ") outside ", n_rows, " rows");
  }
  BRIOCHE_CHECK(layout.branch.empty() || int64_t(layout.branch.size()) == n_rows, "dense_attention: branch has ",
                layout.branch.size(), " entries for ", n_rows, " rows");
  BRIOCHE_CHECK(p.sliding_window == 0 || int64_t(layout.positions.size()) == n_rows,
                "dense_attention: a sliding window needs one position per row");
}

}  // namespace

void dense_attention(const DenseAttentionInputs& in, const DenseAttentionLayout& layout, const DenseAttentionParams& p,
                     Tensor& out, Tensor& lse) {
  const auto& [q, k, v] = in;
  auto qs = detail::f32_rows(q, "dense_attention", "q");
  auto ks = detail::f32_rows(k, "dense_attention", "k");
  auto vs = detail::f32_rows(v, "dense_attention", "v");
  auto os = detail::f32_rows(out, "dense_attention", "out");
  auto ls = detail::f32_rows(lse, "dense_attention", "lse");
  BRIOCHE_CHECK(qs.dim == p.n_heads * p.head_dim && os.dim == qs.dim && ks.dim == p.n_kv_heads * p.head_dim &&
                    vs.dim == ks.dim && ls.dim == p.n_heads,
                "dense_attention: q ", q.describe(), " k ", k.describe(), " v ", v.describe(), " out ", out.describe(),
                " lse ", lse.describe(), " do not match ", p.n_heads, " heads of ", p.head_dim);
  check_layout(layout, p, qs.n_rows);
  const backend::cpu::DenseAttentionArgs args{.q = qs.data,
                                              .k = ks.data,
                                              .v = vs.data,
                                              .out = nullptr,
                                              .lse = nullptr,
                                              .dout = nullptr,
                                              .out_w = os.data,
                                              .lse_w = ls.data,
                                              .dq = nullptr,
                                              .dk = nullptr,
                                              .dv = nullptr,
                                              .ld_q = qs.stride,
                                              .ld_k = ks.stride,
                                              .ld_v = vs.stride,
                                              .ld_out = os.stride,
                                              .ld_lse = ls.stride,
                                              .ld_dout = 0,
                                              .ld_dq = 0,
                                              .ld_dk = 0,
                                              .ld_dv = 0,
                                              .layout = layout,
                                              .params = p};
  if (detail::common_device("dense_attention", {&q, &k, &v, &out, &lse}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::dense_attention(args);
#else
    detail::fail_no_cuda("dense_attention");
#endif
  }
  backend::cpu::dense_attention(args);
}

void dense_attention_backward(const DenseAttentionInputs& in, const DenseAttentionUpstream& upstream,
                              const DenseAttentionLayout& layout, const DenseAttentionParams& p,
                              const DenseAttentionGrads& g) {
  const auto& [q, k, v] = in;
  const auto& [out, lse, dout] = upstream;
  auto qs = detail::f32_rows(q, "dense_attention_backward", "q");
  auto ks = detail::f32_rows(k, "dense_attention_backward", "k");
  auto vs = detail::f32_rows(v, "dense_attention_backward", "v");
  auto os = detail::f32_rows(out, "dense_attention_backward", "out");
  auto ls = detail::f32_rows(lse, "dense_attention_backward", "lse");
  auto ds = detail::f32_rows(dout, "dense_attention_backward", "dout");
  auto dqs = detail::f32_rows(g.dq, "dense_attention_backward", "dq");
  auto dks = detail::f32_rows(g.dk, "dense_attention_backward", "dk");
  auto dvs = detail::f32_rows(g.dv, "dense_attention_backward", "dv");
  BRIOCHE_CHECK(ds.dim == qs.dim && dqs.dim == qs.dim && dks.dim == ks.dim && dvs.dim == vs.dim,
                "dense_attention_backward: gradient shapes do not match q/k/v");
  check_layout(layout, p, qs.n_rows);
  const backend::cpu::DenseAttentionArgs args{.q = qs.data,
                                              .k = ks.data,
                                              .v = vs.data,
                                              .out = os.data,
                                              .lse = ls.data,
                                              .dout = ds.data,
                                              .out_w = nullptr,
                                              .lse_w = nullptr,
                                              .dq = dqs.data,
                                              .dk = dks.data,
                                              .dv = dvs.data,
                                              .ld_q = qs.stride,
                                              .ld_k = ks.stride,
                                              .ld_v = vs.stride,
                                              .ld_out = os.stride,
                                              .ld_lse = ls.stride,
                                              .ld_dout = ds.stride,
                                              .ld_dq = dqs.stride,
                                              .ld_dk = dks.stride,
                                              .ld_dv = dvs.stride,
                                              .layout = layout,
                                              .params = p};
  if (detail::common_device("dense_attention_backward", {&q, &k, &v, &out, &lse, &dout, &g.dq, &g.dk, &g.dv}) ==
      Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::dense_attention_backward(args);
#else
    detail::fail_no_cuda("dense_attention_backward");
#endif
  }
  backend::cpu::dense_attention_backward(args);
}

}  // namespace brioche::ops
