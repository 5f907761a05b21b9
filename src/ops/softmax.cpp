#include "ops/softmax.h"

#include "backend/cpu/softmax.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#endif

namespace brioche::ops {

void softmax(Tensor& x) {
  x.note_written();
  auto r = detail::f32_rows(x, "softmax", "x");
  if (x.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::softmax(r.data, r.n_rows, r.dim, r.stride);
#else
    detail::fail_no_cuda("softmax");
#endif
  }
  backend::cpu::softmax(r.data, r.n_rows, r.dim, r.stride);
}

}  // namespace brioche::ops
