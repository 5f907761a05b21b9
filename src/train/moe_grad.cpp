#include "train/moe_grad.h"

#include "core/error.h"
#include "ops/device.h"
#include "ops/gather_rows.h"
#include "ops/moe.h"

namespace brioche::train {

Tensor expert_output_grad(const Tensor& d_out, std::span<const int32_t> rows, std::span<const int32_t> slots,
                          std::span<const float> weights, const Tensor& y, std::vector<double>& d_weight) {
  const int64_t m = int64_t(rows.size()), hidden = d_out.dim(1);
  BRIOCHE_CHECK(slots.size() == rows.size() && weights.size() == rows.size() && y.rank() == 2 && y.dim(0) == m &&
                    y.dim(1) == hidden,
                "expert_output_grad: expected ", m, " slots, weights and rows of y [", m, ", ", hidden, "], got ",
                slots.size(), ", ", weights.size(), " and ", y.describe());
  Tensor d_y = ops::uninitialized(DType::F32, {m, hidden}, Device::CPU);
  ops::gather_rows(d_out, rows, d_y);
  for (int64_t i = 0; i < m; ++i) {
    double dot = 0.0;
    const float* a = d_y.row_as<float>(i);
    const float* b = y.row_as<float>(i);
    for (int64_t j = 0; j < hidden; ++j) dot += double(a[j]) * double(b[j]);
    const size_t slot = size_t(slots[size_t(i)]);
    BRIOCHE_CHECK(slot < d_weight.size(), "expert_output_grad: slot ", slot, " outside the ", d_weight.size(),
                  " routing slots");
    d_weight[slot] = dot;
  }
  ops::scale_rows(d_y, weights);
  return d_y;
}

}  // namespace brioche::train
