#include "ops/matmul.h"

#include "backend/cpu/matmul.h"
#include "core/error.h"
#include "ops/matmul_args.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#endif

namespace brioche::ops {

namespace detail {

cpu::MatmulArgs matmul_args(const Tensor& x, const Tensor& w, const Tensor& y, std::string_view op) {
  BRIOCHE_CHECK(x.defined() && w.defined() && y.defined(), op, ": x, w and y must all be defined");
  BRIOCHE_CHECK(w.rank() == 2, op, ": weight must be rank 2 [out_features, in_features], got ", w.describe());
  BRIOCHE_CHECK(x.rank() == 2 && y.rank() == 2, op, ": x and y must be rank 2, got x ", x.describe(), " and y ",
                y.describe());
  BRIOCHE_CHECK(x.dtype() == DType::F32 && y.dtype() == DType::F32, op, ": x and y must be f32, got x ", x.describe(),
                " and y ", y.describe());
  const int64_t n = x.dim(0), k = x.dim(1), m = w.dim(0);
  BRIOCHE_CHECK(w.dim(1) == k, op, ": x ", x.describe(), " has ", k, " features but weight ", w.describe(), " expects ",
                w.dim(1));
  BRIOCHE_CHECK(y.dim(0) == n && y.dim(1) == m, op, ": output must be [", n, ", ", m, "], got ", y.describe());
  BRIOCHE_CHECK(n <= 1 || x.stride(1) == 4, op, ": x rows must be contiguous, got ", x.describe());
  BRIOCHE_CHECK(m <= 1 || y.stride(1) == 4, op, ": y rows must be contiguous, got ", y.describe());
#if !BRIOCHE_CUDA
  BRIOCHE_CHECK(w.device() != Device::CUDA, op, ": weight ", w.describe(),
                " is on CUDA but the CUDA backend is not built");
#endif
  BRIOCHE_CHECK(x.device() == w.device() && y.device() == w.device(), op,
                ": x, w and y must be on the same device, got x on ", device_name(x.device()), ", w on ",
                device_name(w.device()), ", y on ", device_name(y.device()));
  return {.x = x.data_as<float>(),
          .ldx = x.stride(0) / 4,
          .wtype = w.dtype(),
          .w = w.data(),
          .w_row_bytes = size_t(w.stride(0)),
          .y = y.data_as<float>(),
          .ldy = y.stride(0) / 4,
          .n = n,
          .m = m,
          .k = k};
}

}  // namespace detail

void matmul(const Tensor& x, const Tensor& w, Tensor& y) {
  y.note_written();
  const cpu::MatmulArgs args = detail::matmul_args(x, w, y, "matmul");
  switch (w.device()) {
    case Device::CPU: cpu::matmul(args); return;
    case Device::CUDA:
#if BRIOCHE_CUDA
      cuda::matmul(args);
      return;
#else
      fail("matmul: weight ", w.describe(), " is on CUDA but the CUDA backend is not built");
#endif
  }
}

}  // namespace brioche::ops
