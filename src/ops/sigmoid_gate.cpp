#include "ops/sigmoid_gate.h"

#include "backend/cpu/sigmoid_gate.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#endif

namespace brioche::ops {

void sigmoid_gate(const Tensor& gate, Tensor& x) {
  x.note_written();
  auto gs = detail::f32_rows(gate, "sigmoid_gate", "gate");
  auto xs = detail::f32_rows(x, "sigmoid_gate", "x");
  BRIOCHE_CHECK(gs.n_rows == xs.n_rows && (gs.dim == xs.dim || gs.dim == 1), "sigmoid_gate: gate ", gate.describe(),
                " must be [", xs.n_rows, ", ", xs.dim, "] or [", xs.n_rows, ", 1] for x ", x.describe());
  const backend::cpu::SigmoidGateArgs args{.gate = gs.data,
                                           .x = xs.data,
                                           .n_rows = xs.n_rows,
                                           .dim = xs.dim,
                                           .gate_stride = gs.stride,
                                           .x_stride = xs.stride,
                                           .per_row = gs.dim != xs.dim};
  if (detail::common_device("sigmoid_gate", {&gate, &x}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::sigmoid_gate(args);
#else
    detail::fail_no_cuda("sigmoid_gate");
#endif
  }
  backend::cpu::sigmoid_gate(args);
}

void sigmoid_gate_backward(const Tensor& gate, const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dgate) {
  dx.note_written();
  dgate.note_written();
  auto gs = detail::f32_rows(gate, "sigmoid_gate_backward", "gate");
  auto xs = detail::f32_rows(x, "sigmoid_gate_backward", "x");
  auto ds = detail::f32_rows(dy, "sigmoid_gate_backward", "dy");
  auto dxs = detail::f32_rows(dx, "sigmoid_gate_backward", "dx");
  auto dgs = detail::f32_rows(dgate, "sigmoid_gate_backward", "dgate");
  BRIOCHE_CHECK(gs.n_rows == xs.n_rows && (gs.dim == xs.dim || gs.dim == 1) && dgs.n_rows == gs.n_rows &&
                    dgs.dim == gs.dim && ds.n_rows == xs.n_rows && ds.dim == xs.dim && dxs.n_rows == xs.n_rows &&
                    dxs.dim == xs.dim,
                "sigmoid_gate_backward: gate ", gate.describe(), ", x ", x.describe(), ", dy ", dy.describe(), ", dx ",
                dx.describe(), " and dgate ", dgate.describe(), " do not agree");
  BRIOCHE_CHECK(detail::common_device("sigmoid_gate_backward", {&gate, &x, &dy, &dx, &dgate}) == Device::CPU,
                "sigmoid_gate_backward: runs on the CPU only in this build");
  backend::cpu::sigmoid_gate_backward({.gate = gs.data,
                                       .x = xs.data,
                                       .dy = ds.data,
                                       .dx = dxs.data,
                                       .dgate = dgs.data,
                                       .n_rows = xs.n_rows,
                                       .dim = xs.dim,
                                       .gate_stride = gs.stride,
                                       .x_stride = xs.stride,
                                       .dy_stride = ds.stride,
                                       .dx_stride = dxs.stride,
                                       .dgate_stride = dgs.stride,
                                       .per_row = gs.dim != xs.dim});
}

}  // namespace brioche::ops
