#include "ops/swiglu.h"

#include "backend/cpu/swiglu.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#include "backend/cuda/train_kernels.h"
#endif

namespace brioche::ops {

void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  out.note_written();
  auto g = detail::f32_rows(gate, "swiglu", "gate");
  auto u = detail::f32_rows(up, "swiglu", "up");
  auto y = detail::f32_or_bf16_rows(out, g.n_rows, g.dim, "swiglu", "out");
  BRIOCHE_CHECK(u.n_rows == g.n_rows && u.dim == g.dim && y.n_rows == g.n_rows && y.dim == g.dim,
                "swiglu: shapes differ: gate ", gate.describe(), ", up ", up.describe(), ", out ", out.describe());
  const backend::cpu::SwigluArgs args{.gate = g.data,
                                      .up = u.data,
                                      .out = y.data,
                                      .n_rows = g.n_rows,
                                      .dim = g.dim,
                                      .gate_stride = g.stride,
                                      .up_stride = u.stride,
                                      .out_stride = y.stride};
  if (detail::common_device("swiglu", {&gate, &up, &out}) == Device::CUDA) {
#if BRIOCHE_CUDA
    if (detail::is_bf16(out)) return cuda::swiglu_to_16bit(args, out.data(), false);  // (CUDA only: checked above)
    return cuda::swiglu(args);
#else
    detail::fail_no_cuda("swiglu");
#endif
  }
  backend::cpu::swiglu(args);
}

}  // namespace brioche::ops
