#include "ops/moe.h"

#include "backend/cpu/moe.h"
#include "ops/check_f32.h"

namespace brioche::ops {

MoeRouting moe_route(const Tensor& logits, int top_k, std::span<const float> per_expert_scale) {
  auto z = detail::f32_rows(logits, "moe_route", "logits");
  BRIOCHE_CHECK(logits.device() == Device::CPU, "moe_route: logits on ", device_name(logits.device()),
                ": this op has only a CPU kernel in this build (Gemma 4 runs on the CPU only)");
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

void scale_rows(Tensor& x, std::span<const float> scale) {
  auto xs = detail::f32_rows(x, "scale_rows", "x");
  BRIOCHE_CHECK(x.device() == Device::CPU, "scale_rows: x on ", device_name(x.device()),
                ": this op has only a CPU kernel in this build (Gemma 4 runs on the CPU only)");
  BRIOCHE_CHECK(int64_t(scale.size()) == xs.n_rows, "scale_rows: ", scale.size(), " scales for ", xs.n_rows, " rows");
  backend::cpu::scale_rows(
      {.x = xs.data, .scale = scale.data(), .n_rows = xs.n_rows, .dim = xs.dim, .x_stride = xs.stride});
}

}  // namespace brioche::ops
