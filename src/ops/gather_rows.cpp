#include "ops/gather_rows.h"

#include "backend/cpu/train_rows.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/train_kernels.h"
#endif

namespace brioche::ops {

namespace {

backend::cpu::RowIndexArgs row_index_args(const Tensor& src, std::span<const int32_t> rows, Tensor& dst, const char* op,
                                          int64_t n_indexed) {
  auto s = detail::f32_rows(src, op, "src");
  auto d = detail::f32_rows(dst, op, "dst");
  BRIOCHE_CHECK(s.dim == d.dim, op, ": src ", src.describe(), " and dst ", dst.describe(), " differ in width");
  for (size_t i = 0; i < rows.size(); ++i) {
    BRIOCHE_CHECK(rows[i] >= 0 && rows[i] < n_indexed, op, ": row index ", rows[i], " at ", i, " outside [0, ",
                  n_indexed, ")");
  }
  return {.src = s.data,
          .dst = d.data,
          .rows = rows.data(),
          .n = int64_t(rows.size()),
          .dim = s.dim,
          .ld_src = s.stride,
          .ld_dst = d.stride};
}

}  // namespace

void gather_rows(const Tensor& src, std::span<const int32_t> rows, Tensor& dst) {
  dst.note_written();
  BRIOCHE_CHECK(dst.defined() && dst.dim(0) == int64_t(rows.size()), "gather_rows: ", rows.size(),
                " indices but dst is ", dst.describe());
  const auto args = row_index_args(src, rows, dst, "gather_rows", src.rank() == 2 ? src.dim(0) : 1);
  if (detail::common_device("gather_rows", {&src, &dst}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::gather_rows(args);
#else
    detail::fail_no_cuda("gather_rows");
#endif
  }
  backend::cpu::gather_rows(args);
}

void scatter_add_rows(const Tensor& src, std::span<const int32_t> rows, Tensor& dst) {
  dst.note_written();
  BRIOCHE_CHECK(src.defined() && src.dim(0) == int64_t(rows.size()), "scatter_add_rows: ", rows.size(),
                " indices but src is ", src.describe());
  const auto args = row_index_args(src, rows, dst, "scatter_add_rows", dst.rank() == 2 ? dst.dim(0) : 1);
  if (detail::common_device("scatter_add_rows", {&src, &dst}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::scatter_add_rows(args);
#else
    detail::fail_no_cuda("scatter_add_rows");
#endif
  }
  backend::cpu::scatter_add_rows(args);
}

}  // namespace brioche::ops
