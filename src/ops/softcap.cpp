#include "ops/softcap.h"

#include <cmath>

#include "backend/cpu/gemma_elementwise.h"
#include "ops/check_f32.h"

namespace brioche::ops {

void softcap(Tensor& x, float cap) {
  auto xs = detail::f32_rows(x, "softcap", "x");
  BRIOCHE_CHECK(std::isfinite(cap) && cap > 0.0f, "softcap: cap must be a finite number > 0, got ", cap);
  BRIOCHE_CHECK(x.device() == Device::CPU, "softcap: x on ", device_name(x.device()),
                ": this op has only a CPU kernel in this build (Gemma 4 runs on the CPU only)");
  backend::cpu::softcap({.x = xs.data, .n_rows = xs.n_rows, .dim = xs.dim, .x_stride = xs.stride, .cap = cap});
}

}  // namespace brioche::ops
