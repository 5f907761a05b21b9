#include "ops/lora_rows.h"

#include <vector>

#include "backend/cpu/lora_rows.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/lora_rows.h"
#endif

namespace brioche::ops {

int32_t max_lora_rows_rank() { return backend::cpu::kMaxLoraRowsRank; }

void lora_rows_add(const Tensor& x, std::span<const LoraRows> segments, Tensor& y, Tensor& u_scratch) {
  y.note_written();
  u_scratch.note_written();
  if (segments.empty()) return;
  auto xs = detail::f32_rows(x, "lora_rows_add", "x");
  auto ys = detail::f32_rows(y, "lora_rows_add", "y");
  auto us = detail::f32_rows(u_scratch, "lora_rows_add", "u_scratch");
  BRIOCHE_CHECK(xs.n_rows == ys.n_rows, "lora_rows_add: x ", x.describe(), " and y ", y.describe(),
                " differ in rows");
  const Device device = detail::common_device("lora_rows_add", {&x, &y, &u_scratch});
  std::vector<backend::cpu::LoraRowsSegment> segs;
  segs.reserve(segments.size());
  int32_t end_of_previous = 0;
  for (const LoraRows& s : segments) {
    BRIOCHE_CHECK(s.a != nullptr && s.bt != nullptr, "lora_rows_add: a segment without factors");
    const Tensor& a = *s.a;
    const Tensor& bt = *s.bt;
    BRIOCHE_CHECK(a.dtype() == DType::F16 && bt.dtype() == DType::F16 && a.rank() == 2 && bt.rank() == 2 &&
                      a.is_contiguous() && bt.is_contiguous() && a.device() == device && bt.device() == device,
                  "lora_rows_add: factors must be contiguous f16 matrices on ", device_name(device), ", got ",
                  a.describe(), " and ", bt.describe());
    const int64_t rank = a.dim(0);
    BRIOCHE_CHECK(a.dim(1) == xs.dim && bt.dim(0) == rank && bt.dim(1) == ys.dim, "lora_rows_add: A ",
                  a.describe(), " and s·Bᵀ ", bt.describe(), " do not map ", xs.dim, " features to ", ys.dim);
    BRIOCHE_CHECK(rank >= 1 && rank <= max_lora_rows_rank() && rank <= us.dim, "lora_rows_add: rank ", rank,
                  " outside [1, ", std::min<int64_t>(max_lora_rows_rank(), us.dim), "]");
    BRIOCHE_CHECK(s.first_row >= end_of_previous && s.n_rows >= 0 && s.first_row + s.n_rows <= xs.n_rows &&
                      s.first_row + s.n_rows <= us.n_rows,
                  "lora_rows_add: segment rows [", s.first_row, ", ", s.first_row + s.n_rows,
                  ") overlap the previous one or leave the batch of ", xs.n_rows);
    end_of_previous = s.first_row + s.n_rows;
    segs.push_back({.first_row = s.first_row, .n_rows = s.n_rows, .rank = int32_t(rank),
                    .a = a.data_as<uint16_t>(), .bt = bt.data_as<uint16_t>()});
  }
  const backend::cpu::LoraRowsArgs args{.x = xs.data, .y = ys.data, .u = us.data, .in = xs.dim, .out = ys.dim,
                                        .ldx = xs.stride, .ldy = ys.stride, .ldu = us.stride,
                                        .segments = segs.data(), .n_segments = int32_t(segs.size())};
  if (device == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::lora_rows_add(args);
#else
    detail::fail_no_cuda("lora_rows_add");
#endif
  }
  backend::cpu::lora_rows_add(args);
}

}  // namespace brioche::ops
