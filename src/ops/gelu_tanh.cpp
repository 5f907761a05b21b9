#include "ops/gelu_tanh.h"

#include "backend/cpu/gemma_elementwise.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/gemma_kernels.h"
#endif

namespace brioche::ops {

void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  auto g = detail::f32_rows(gate, "gelu_tanh_mul", "gate");
  auto u = detail::f32_rows(up, "gelu_tanh_mul", "up");
  auto y = detail::f32_rows(out, "gelu_tanh_mul", "out");
  BRIOCHE_CHECK(u.n_rows == g.n_rows && u.dim == g.dim && y.n_rows == g.n_rows && y.dim == g.dim,
                "gelu_tanh_mul: shapes differ: gate ", gate.describe(), ", up ", up.describe(), ", out ",
                out.describe());
  out.note_written();
  const backend::cpu::GeluTanhMulArgs args{.gate = g.data,
                                           .up = u.data,
                                           .out = y.data,
                                           .n_rows = g.n_rows,
                                           .dim = g.dim,
                                           .gate_stride = g.stride,
                                           .up_stride = u.stride,
                                           .out_stride = y.stride};
  if (detail::common_device("gelu_tanh_mul", {&gate, &up, &out}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::gelu_tanh_mul(args);
#else
    detail::fail_no_cuda("gelu_tanh_mul");
#endif
  }
  backend::cpu::gelu_tanh_mul(args);
}

void gelu_tanh_mul_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor* dup) {
  auto g = detail::f32_rows(gate, "gelu_tanh_mul_backward", "gate");
  auto u = detail::f32_rows(up, "gelu_tanh_mul_backward", "up");
  auto dy = detail::f32_rows(dout, "gelu_tanh_mul_backward", "dout");
  auto dg = detail::f32_rows(dgate, "gelu_tanh_mul_backward", "dgate");
  detail::F32Rows du{nullptr, g.n_rows, g.dim, 0};
  if (dup) du = detail::f32_rows(*dup, "gelu_tanh_mul_backward", "dup");
  for (const detail::F32Rows* t : {&u, &dy, &dg, &du})
    BRIOCHE_CHECK(t->n_rows == g.n_rows && t->dim == g.dim, "gelu_tanh_mul_backward: shapes differ: gate ",
                  gate.describe(), ", up ", up.describe(), ", dout ", dout.describe(), ", dgate ", dgate.describe());
  BRIOCHE_CHECK(!dup || du.data != dy.data, "gelu_tanh_mul_backward: dup must not alias dout");
  BRIOCHE_CHECK(detail::common_device("gelu_tanh_mul_backward", {&gate, &up, &dout, &dgate}) == Device::CPU,
                "gelu_tanh_mul_backward: tensors on ", device_name(gate.device()),
                ": this op has only a CPU kernel in this build (Gemma 4 trains on the CPU only)");
  backend::cpu::gelu_tanh_mul_backward({.gate = g.data,
                                        .up = u.data,
                                        .dout = dy.data,
                                        .dgate = dg.data,
                                        .dup = du.data,
                                        .n_rows = g.n_rows,
                                        .dim = g.dim,
                                        .gate_stride = g.stride,
                                        .up_stride = u.stride,
                                        .dout_stride = dy.stride,
                                        .dgate_stride = dg.stride,
                                        .dup_stride = du.stride});
}

}  // namespace brioche::ops
