#include "ops/rms_norm.h"

#include "backend/cpu/rms_norm.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#endif

namespace brioche::ops {

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  out.note_written();
  auto xs = detail::f32_rows(x, "rms_norm", "x");
  auto ws = detail::f32_rows(weight, "rms_norm", "weight");
  auto ys = detail::f32_rows(out, "rms_norm", "out");
  BRIOCHE_CHECK(ws.n_rows == 1 && ws.dim == xs.dim, "rms_norm: weight must be [", xs.dim, "], got ", weight.describe());
  BRIOCHE_CHECK(ys.n_rows == xs.n_rows && ys.dim == xs.dim, "rms_norm: out ", out.describe(), " does not match x ",
                x.describe());
  const backend::cpu::RmsNormArgs args{.x = xs.data,
                                       .weight = ws.data,
                                       .out = ys.data,
                                       .n_rows = xs.n_rows,
                                       .dim = xs.dim,
                                       .x_stride = xs.stride,
                                       .out_stride = ys.stride,
                                       .eps = eps};
  if (detail::common_device("rms_norm", {&x, &weight, &out}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::rms_norm(args);
#else
    detail::fail_no_cuda("rms_norm");
#endif
  }
  backend::cpu::rms_norm(args);
}

}  // namespace brioche::ops
