#include "ops/linear_backward.h"

#include "backend/cpu/linear_backward.h"
#include "ops/amx_weight_tiles.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/train_kernels.h"
#endif

namespace brioche::ops {

void matmul_input_grad(const Tensor& dy, const Tensor& w, Tensor& dx, GradWrite mode) {
  auto g = detail::f32_rows(dy, "matmul_input_grad", "dy");
  auto out = detail::f32_rows(dx, "matmul_input_grad", "dx");
  BRIOCHE_CHECK(w.defined() && w.rank() == 2, "matmul_input_grad: weight must be rank 2, got ", w.describe());
  BRIOCHE_CHECK(g.dim == w.dim(0) && out.dim == w.dim(1) && g.n_rows == out.n_rows, "matmul_input_grad: dy ",
                dy.describe(), " · w ", w.describe(), " does not give dx ", dx.describe());
  const backend::cpu::MatmulInputGradArgs args{.dy = g.data,
                                               .wtype = w.dtype(),
                                               .w = w.data(),
                                               .w_row_bytes = size_t(w.stride(0)),
                                               .dx = out.data,
                                               .ld_dy = g.stride,
                                               .ld_dx = out.stride,
                                               .n = g.n_rows,
                                               .m = g.dim,
                                               .k = out.dim,
                                               .accumulate = mode == GradWrite::Accumulate};
  if (detail::common_device("matmul_input_grad", {&dy, &w, &dx}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::matmul_input_grad(args);
#else
    detail::fail_no_cuda("matmul_input_grad");
#endif
  }
  backend::cpu::MatmulInputGradArgs cpu_args = args;
  if (backend::cpu::amx_weight_products(args.wtype, args.n, args.m, args.k))
    cpu_args.w_tiles = amx_weight_tiles(w, backend::cpu::AmxWeightProduct::InputGrad);
  backend::cpu::matmul_input_grad(cpu_args);
}

void matmul_weight_grad(const Tensor& dy, const Tensor& x, Tensor& dw) {
  auto g = detail::f32_rows(dy, "matmul_weight_grad", "dy");
  auto xs = detail::f32_rows(x, "matmul_weight_grad", "x");
  auto w = detail::f32_rows(dw, "matmul_weight_grad", "dw");
  BRIOCHE_CHECK(g.n_rows == xs.n_rows && w.n_rows == g.dim && w.dim == xs.dim, "matmul_weight_grad: dyᵀ ",
                dy.describe(), " · x ", x.describe(), " does not give dw ", dw.describe());
  const backend::cpu::MatmulWeightGradArgs args{.dy = g.data,
                                                .x = xs.data,
                                                .dw = w.data,
                                                .ld_dy = g.stride,
                                                .ld_x = xs.stride,
                                                .ld_dw = w.stride,
                                                .n = g.n_rows,
                                                .m = g.dim,
                                                .k = xs.dim};
  if (detail::common_device("matmul_weight_grad", {&dy, &x, &dw}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::matmul_weight_grad(args);
#else
    detail::fail_no_cuda("matmul_weight_grad");
#endif
  }
  backend::cpu::matmul_weight_grad(args);
}

}  // namespace brioche::ops
