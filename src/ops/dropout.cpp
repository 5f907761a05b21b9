#include "ops/dropout.h"

#include "backend/cpu/train_rows.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/train_kernels.h"
#endif

namespace brioche::ops {

void dropout(const Tensor& src, const DropoutMask& mask, Tensor& dst) {
  dst.note_written();
  auto s = detail::f32_rows(src, "dropout", "src");
  auto d = detail::f32_rows(dst, "dropout", "dst");
  BRIOCHE_CHECK(s.n_rows == d.n_rows && s.dim == d.dim, "dropout: src ", src.describe(), " and dst ", dst.describe(),
                " differ in shape");
  BRIOCHE_CHECK(mask.p >= 0.0f && mask.p < 1.0f, "dropout: p must be in [0, 1), got ", mask.p);
  const backend::cpu::DropoutArgs args{.src = s.data,
                                       .dst = d.data,
                                       .n_rows = s.n_rows,
                                       .dim = s.dim,
                                       .ld_src = s.stride,
                                       .ld_dst = d.stride,
                                       .p = mask.p,
                                       .key = mask.key,
                                       .first_row = mask.first_row};
  if (detail::common_device("dropout", {&src, &dst}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::dropout(args);
#else
    detail::fail_no_cuda("dropout");
#endif
  }
  backend::cpu::dropout(args);
}

}  // namespace brioche::ops
