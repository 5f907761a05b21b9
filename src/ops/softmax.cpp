#include "ops/softmax.h"

#include "backend/cpu/softmax.h"
#include "ops/check_f32.h"

namespace brioche::ops {

void softmax(Tensor& x) {
  auto r = detail::f32_rows(x, "softmax", "x");
  backend::cpu::softmax(r.data, r.n_rows, r.dim, r.stride);
}

}  // namespace brioche::ops
