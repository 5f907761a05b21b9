#include "ops/softcap.h"

#include <cmath>

#include "backend/cpu/gemma_elementwise.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/gemma_kernels.h"
#endif

namespace brioche::ops {

void softcap(Tensor& x, float cap) {
  auto xs = detail::f32_rows(x, "softcap", "x");
  BRIOCHE_CHECK(std::isfinite(cap) && cap > 0.0f, "softcap: cap must be a finite number > 0, got ", cap);
  x.note_written();
  const backend::cpu::SoftcapArgs args{
      .x = xs.data, .n_rows = xs.n_rows, .dim = xs.dim, .x_stride = xs.stride, .cap = cap};
  if (x.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::softcap(args);
#else
    detail::fail_no_cuda("softcap");
#endif
  }
  backend::cpu::softcap(args);
}

}  // namespace brioche::ops
