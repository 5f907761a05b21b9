#include "ops/moe.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/moe.h"
#include "ops/check_f32.h"
#include "ops/device.h"
#include "ops/matmul.h"
#include "ops/matmul_args.h"
#if BRIOCHE_CUDA
#include "backend/cuda/gemma_kernels.h"
#endif

namespace brioche::ops {

MoeRouting moe_route(const Tensor& logits_in, int top_k, std::span<const float> per_expert_scale) {
  // The routing runs on the host, where its caller needs the experts' ids:
  // device logits ([n_rows, n_experts], a few floats a row) are read back
  // first (this waits for the device).
  const Tensor logits = logits_in.device() == Device::CPU ? logits_in : to_device(logits_in, Device::CPU);
  auto z = detail::f32_rows(logits, "moe_route", "logits");
  BRIOCHE_CHECK(int64_t(per_expert_scale.size()) == z.dim, "moe_route: ", per_expert_scale.size(),
                " expert scales for ", z.dim, " experts");
  BRIOCHE_CHECK(top_k >= 1 && top_k <= z.dim, "moe_route: top_k ", top_k, " outside 1..", z.dim);
  MoeRouting r;
  r.top_k = top_k;
  r.expert.resize(size_t(z.n_rows * top_k));
  r.weight.resize(size_t(z.n_rows * top_k));
  backend::cpu::moe_route({.logits = z.data,
                           .per_expert_scale = per_expert_scale.data(),
                           .expert = r.expert.data(),
                           .weight = r.weight.data(),
                           .n_rows = z.n_rows,
                           .logits_stride = z.stride,
                           .n_experts = int(z.dim),
                           .top_k = top_k});
  return r;
}

namespace {

// expert_matmul with the pairs' experts in host memory (`expert`) or, on
// CUDA, in device memory (`device_expert`, n_pairs of them, not checked here).
void expert_pairs_matmul(const Tensor& x, std::span<const int32_t> x_rows, const Tensor& experts,
                         std::span<const int32_t> expert, const int32_t* device_expert, Tensor& y) {
  y.note_written();
  BRIOCHE_CHECK(experts.defined() && experts.rank() == 3, "expert_matmul: experts must be [n_experts, m, k], got ",
                experts.defined() ? experts.describe() : std::string("undefined"));
  BRIOCHE_CHECK(device_expert != nullptr || x_rows.size() == expert.size(), "expert_matmul: ", x_rows.size(),
                " x rows for ", expert.size(), " experts");
  const int64_t n_pairs = int64_t(x_rows.size()), n_x = x.defined() && x.rank() == 2 ? x.dim(0) : 0;
  BRIOCHE_CHECK(y.defined() && y.rank() == 2 && y.dim(0) == n_pairs, "expert_matmul: y must be [", n_pairs,
                ", m], got ", y.defined() ? y.describe() : std::string("undefined"));
  for (int64_t p = 0; p < n_pairs; ++p) {
    BRIOCHE_CHECK(device_expert != nullptr || (expert[size_t(p)] >= 0 && expert[size_t(p)] < experts.dim(0)),
                  "expert_matmul: pair ", p, " names expert ", device_expert ? 0 : expert[size_t(p)], " of ",
                  experts.dim(0));
    BRIOCHE_CHECK(x_rows[size_t(p)] >= 0 && x_rows[size_t(p)] < n_x, "expert_matmul: pair ", p, " reads x row ",
                  x_rows[size_t(p)], " of ", n_x);
  }
  if (n_pairs == 0) return;
  // One pair as a matmul of one expert's matrix: checks x, y and the shapes.
  const cpu::MatmulArgs first =
      detail::matmul_args(x.slice(0, 0, 1), experts.select(0), y.slice(0, 0, 1), "expert_matmul");
  BRIOCHE_CHECK(experts.stride(1) == int64_t(first.w_row_bytes), "expert_matmul: expert rows must be packed");
  BRIOCHE_CHECK((first.k <= 1 || x.stride(1) == 4) && (first.m <= 1 || y.stride(1) == 4),
                "expert_matmul: x and y rows must be contiguous, got x ", x.describe(), " and y ", y.describe());
  if (x.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::expert_matmul({.x = first.x,
                                .ldx = first.ldx,
                                .wtype = first.wtype,
                                .w = experts.data(),
                                .expert_bytes = size_t(experts.stride(0)),
                                .w_row_bytes = first.w_row_bytes,
                                .x_rows = x_rows.data(),
                                .expert = expert.data(),
                                .device_expert = device_expert,
                                .n_pairs = n_pairs,
                                .m = first.m,
                                .k = first.k,
                                .y = first.y,
                                .ldy = first.ldy});
#else
    detail::fail_no_cuda("expert_matmul");
#endif
  }
  for (int64_t p = 0; p < n_pairs; ++p) {
    Tensor yp = y.slice(0, p, p + 1);
    matmul(x.slice(0, x_rows[size_t(p)], x_rows[size_t(p)] + 1), experts.select(expert[size_t(p)]), yp);
  }
}

// A rank-1 tensor of `n` values of `dtype`, contiguous, on `device`.
void check_vector(const Tensor& t, DType dtype, int64_t n, Device device, std::string_view op, std::string_view what) {
  BRIOCHE_CHECK(
      t.defined() && t.dtype() == dtype && t.rank() == 1 && t.dim(0) == n && t.is_contiguous() && t.device() == device,
      op, ": ", what, " must be ", dtype_name(dtype), " [", n, "] on ", device_name(device), ", got ",
      t.defined() ? t.describe() : std::string("undefined"));
}

}  // namespace

void expert_matmul(const Tensor& x, std::span<const int32_t> x_rows, const Tensor& experts,
                   std::span<const int32_t> expert, Tensor& y) {
  expert_pairs_matmul(x, x_rows, experts, expert, nullptr, y);
}

void expert_matmul(const Tensor& x, std::span<const int32_t> x_rows, const Tensor& experts, const Tensor& expert,
                   Tensor& y) {
  BRIOCHE_CHECK(x.defined(), "expert_matmul: x is undefined");
  check_vector(expert, DType::I32, int64_t(x_rows.size()), x.device(), "expert_matmul", "expert");
  if (x.device() == Device::CUDA) return expert_pairs_matmul(x, x_rows, experts, {}, expert.data_as<int32_t>(), y);
  expert_pairs_matmul(x, x_rows, experts, std::span<const int32_t>(expert.data_as<int32_t>(), x_rows.size()), nullptr,
                      y);
}

void moe_route_pairs(const Tensor& logits, int top_k, std::span<const float> per_expert_scale, Tensor& expert,
                     Tensor& weight) {
  auto z = detail::f32_rows(logits, "moe_route_pairs", "logits");
  BRIOCHE_CHECK(int64_t(per_expert_scale.size()) == z.dim, "moe_route_pairs: ", per_expert_scale.size(),
                " expert scales for ", z.dim, " experts");
  BRIOCHE_CHECK(top_k >= 1 && top_k <= z.dim && top_k <= kMaxRoutePairsTopK, "moe_route_pairs: top_k ", top_k,
                " outside 1..", std::min<int64_t>(z.dim, kMaxRoutePairsTopK));
  const int64_t pairs = z.n_rows * top_k;
  check_vector(expert, DType::I32, pairs, logits.device(), "moe_route_pairs", "expert");
  check_vector(weight, DType::F32, pairs, logits.device(), "moe_route_pairs", "weight");
  expert.note_written();
  weight.note_written();
  if (logits.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::moe_route_pairs({.logits = z.data,
                                  .logits_stride = z.stride,
                                  .per_expert_scale = per_expert_scale.data(),
                                  .expert = expert.data_as<int32_t>(),
                                  .weight = weight.data_as<float>(),
                                  .n_rows = z.n_rows,
                                  .n_experts = int(z.dim),
                                  .top_k = top_k});
#else
    detail::fail_no_cuda("moe_route_pairs");
#endif
  }
  const MoeRouting route = moe_route(logits, top_k, per_expert_scale);
  int32_t* e = expert.data_as<int32_t>();
  float* w = weight.data_as<float>();
  for (int64_t r = 0; r < z.n_rows; ++r) {
    std::vector<int> ks(static_cast<size_t>(top_k));
    std::iota(ks.begin(), ks.end(), 0);
    std::sort(ks.begin(), ks.end(),
              [&](int a, int b) { return route.expert[size_t(r * top_k + a)] < route.expert[size_t(r * top_k + b)]; });
    for (int j = 0; j < top_k; ++j) {
      e[r * top_k + j] = route.expert[size_t(r * top_k + ks[size_t(j)])];
      w[r * top_k + j] = route.weight[size_t(r * top_k + ks[size_t(j)])];
    }
  }
}

void scale_rows(Tensor& x, std::span<const float> scale) {
  auto xs = detail::f32_rows(x, "scale_rows", "x");
  BRIOCHE_CHECK(int64_t(scale.size()) == xs.n_rows, "scale_rows: ", scale.size(), " scales for ", xs.n_rows, " rows");
  x.note_written();
  const backend::cpu::ScaleRowsArgs args{
      .x = xs.data, .scale = scale.data(), .n_rows = xs.n_rows, .dim = xs.dim, .x_stride = xs.stride};
  if (x.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::scale_rows(args);  // scale is host memory: the launcher uploads it
#else
    detail::fail_no_cuda("scale_rows");
#endif
  }
  backend::cpu::scale_rows(args);
}

void scale_rows(Tensor& x, const Tensor& scale) {
  auto xs = detail::f32_rows(x, "scale_rows", "x");
  check_vector(scale, DType::F32, xs.n_rows, x.device(), "scale_rows", "scale");
  if (x.device() != Device::CUDA)
    return scale_rows(x, std::span<const float>(scale.data_as<float>(), size_t(xs.n_rows)));
  x.note_written();
#if BRIOCHE_CUDA
  cuda::scale_rows_device(
      {.x = xs.data, .scale = scale.data_as<float>(), .n_rows = xs.n_rows, .dim = xs.dim, .x_stride = xs.stride});
#else
  detail::fail_no_cuda("scale_rows");
#endif
}

}  // namespace brioche::ops
