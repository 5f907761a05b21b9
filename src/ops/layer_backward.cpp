#include "ops/layer_backward.h"

#include <vector>

#include "backend/cpu/layer_backward.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/train_kernels.h"
#endif

namespace brioche::ops {

void rms_norm_backward(const Tensor& x, const Tensor& weight, float eps, const Tensor& dy, Tensor& dx) {
  auto xs = detail::f32_rows(x, "rms_norm_backward", "x");
  auto ws = detail::f32_rows(weight, "rms_norm_backward", "weight");
  auto gs = detail::f32_rows(dy, "rms_norm_backward", "dy");
  auto os = detail::f32_rows(dx, "rms_norm_backward", "dx");
  BRIOCHE_CHECK(ws.n_rows == 1 && ws.dim == xs.dim && gs.dim == xs.dim && os.dim == xs.dim && gs.n_rows == xs.n_rows &&
                    os.n_rows == xs.n_rows,
                "rms_norm_backward: shapes x ", x.describe(), ", weight ", weight.describe(), ", dy ", dy.describe(),
                ", dx ", dx.describe(), " do not agree");
  const backend::cpu::RmsNormBackwardArgs args{.x = xs.data,
                                               .weight = ws.data,
                                               .dy = gs.data,
                                               .dx = os.data,
                                               .n_rows = xs.n_rows,
                                               .dim = xs.dim,
                                               .x_stride = xs.stride,
                                               .dy_stride = gs.stride,
                                               .dx_stride = os.stride,
                                               .eps = eps};
  if (detail::common_device("rms_norm_backward", {&x, &weight, &dy, &dx}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::rms_norm_backward(args);
#else
    detail::fail_no_cuda("rms_norm_backward");
#endif
  }
  backend::cpu::rms_norm_backward(args);
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup) {
  auto g = detail::f32_rows(gate, "swiglu_backward", "gate");
  auto u = detail::f32_rows(up, "swiglu_backward", "up");
  auto d = detail::f32_rows(dout, "swiglu_backward", "dout");
  // The gradients in f32, or both in dense bf16 (CUDA only).
  const bool grads_bf16 = detail::is_bf16(dgate);
  BRIOCHE_CHECK(detail::is_bf16(dup) == grads_bf16,
                "swiglu_backward: dgate and dup must both be f32 or both bf16, "
                "got ",
                dgate.describe(), " and ", dup.describe());
  auto dg = detail::f32_or_bf16_rows(dgate, g.n_rows, g.dim, "swiglu_backward", "dgate");
  auto du = detail::f32_or_bf16_rows(dup, g.n_rows, g.dim, "swiglu_backward", "dup");
  for (const auto* t : {&u, &d, &dg, &du}) {
    BRIOCHE_CHECK(t->n_rows == g.n_rows && t->dim == g.dim, "swiglu_backward: every tensor must be ", gate.describe(),
                  "-shaped");
  }
  const backend::cpu::SwigluBackwardArgs args{.gate = g.data,
                                              .up = u.data,
                                              .dout = d.data,
                                              .dgate = dg.data,
                                              .dup = du.data,
                                              .n_rows = g.n_rows,
                                              .dim = g.dim,
                                              .ld_gate = g.stride,
                                              .ld_up = u.stride,
                                              .ld_dout = d.stride,
                                              .ld_dgate = dg.stride,
                                              .ld_dup = du.stride};
  if (detail::common_device("swiglu_backward", {&gate, &up, &dout, &dgate, &dup}) == Device::CUDA) {
#if BRIOCHE_CUDA
    if (grads_bf16) return cuda::swiglu_backward_to_bf16(args, dgate.data(), dup.data());
    return cuda::swiglu_backward(args);
#else
    detail::fail_no_cuda("swiglu_backward");
#endif
  }
  backend::cpu::swiglu_backward(args);
}

// Runs on dx's device through ops::rope (the CUDA kernel uploads the negated
// positions like any others): sin(−a) = −sin(a) exactly, so it is the exact transpose.
void rope_backward(Tensor& dx, std::span<const int32_t> positions, const RopeParams& params) {
  std::vector<int32_t> negated(positions.begin(), positions.end());
  for (int32_t& p : negated) p = -p;
  rope(dx, negated, params);
}

}  // namespace brioche::ops
