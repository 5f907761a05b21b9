#include "ops/scaled_add.h"

#include "backend/cpu/train_rows.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/train_kernels.h"
#endif

namespace brioche::ops {

void add_scaled(const Tensor& x, float s, Tensor& y) {
  y.note_written();
  auto xs = detail::f32_rows(x, "add_scaled", "x");
  auto ys = detail::f32_rows(y, "add_scaled", "y");
  BRIOCHE_CHECK(xs.n_rows == ys.n_rows && xs.dim == ys.dim, "add_scaled: x ", x.describe(), " and y ", y.describe(),
                " differ in shape");
  const backend::cpu::ScaledAddArgs args{
      .x = xs.data, .y = ys.data, .n_rows = xs.n_rows, .dim = xs.dim, .ldx = xs.stride, .ldy = ys.stride, .s = s};
  if (detail::common_device("add_scaled", {&x, &y}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::add_scaled(args);
#else
    detail::fail_no_cuda("add_scaled");
#endif
  }
  backend::cpu::add_scaled(args);
}

void scale(Tensor& x, float s) {
  x.note_written();
  auto xs = detail::f32_rows(x, "scale", "x");
  const backend::cpu::ScaleArgs args{.x = xs.data, .n_rows = xs.n_rows, .dim = xs.dim, .ldx = xs.stride, .s = s};
  if (x.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::scale(args);
#else
    detail::fail_no_cuda("scale");
#endif
  }
  backend::cpu::scale(args);
}

void fill(Tensor& x, float value) {
  x.note_written();
  auto xs = detail::f32_rows(x, "fill", "x");
  const backend::cpu::ScaleArgs args{.x = xs.data, .n_rows = xs.n_rows, .dim = xs.dim, .ldx = xs.stride, .s = value};
  if (x.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::fill(args);
#else
    detail::fail_no_cuda("fill");
#endif
  }
  backend::cpu::fill(args);
}

}  // namespace brioche::ops
