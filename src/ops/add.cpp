#include "ops/add.h"

#include "backend/cpu/add.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#endif

namespace brioche::ops {

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  out.note_written();
  auto ra = detail::f32_rows(a, "add", "a");
  auto rb = detail::f32_rows(b, "add", "b");
  auto ro = detail::f32_rows(out, "add", "out");
  BRIOCHE_CHECK(rb.n_rows == ra.n_rows && rb.dim == ra.dim && ro.n_rows == ra.n_rows && ro.dim == ra.dim,
                "add: shapes differ: a ", a.describe(), ", b ", b.describe(), ", out ", out.describe());
  const backend::cpu::AddArgs args{.a = ra.data,
                                   .b = rb.data,
                                   .out = ro.data,
                                   .n_rows = ra.n_rows,
                                   .dim = ra.dim,
                                   .a_stride = ra.stride,
                                   .b_stride = rb.stride,
                                   .out_stride = ro.stride};
  if (detail::common_device("add", {&a, &b, &out}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::add(args);
#else
    detail::fail_no_cuda("add");
#endif
  }
  backend::cpu::add(args);
}

void add_bias(Tensor& x, const Tensor& bias) {
  x.note_written();
  auto rx = detail::f32_rows(x, "add_bias", "x");
  auto rb = detail::f32_rows(bias, "add_bias", "bias");
  BRIOCHE_CHECK(rb.n_rows == 1 && rb.dim == rx.dim, "add_bias: bias must be [", rx.dim, "], got ", bias.describe());
  if (detail::common_device("add_bias", {&x, &bias}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::add_bias(rx.data, rb.data, rx.n_rows, rx.dim, rx.stride);
#else
    detail::fail_no_cuda("add_bias");
#endif
  }
  backend::cpu::add_bias(rx.data, rb.data, rx.n_rows, rx.dim, rx.stride);
}

}  // namespace brioche::ops
