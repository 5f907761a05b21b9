#include "ops/gelu_tanh.h"

#include "backend/cpu/gemma_elementwise.h"
#include "ops/check_f32.h"

namespace brioche::ops {

void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  auto g = detail::f32_rows(gate, "gelu_tanh_mul", "gate");
  auto u = detail::f32_rows(up, "gelu_tanh_mul", "up");
  auto y = detail::f32_rows(out, "gelu_tanh_mul", "out");
  BRIOCHE_CHECK(u.n_rows == g.n_rows && u.dim == g.dim && y.n_rows == g.n_rows && y.dim == g.dim,
                "gelu_tanh_mul: shapes differ: gate ", gate.describe(), ", up ", up.describe(), ", out ",
                out.describe());
  BRIOCHE_CHECK(detail::common_device("gelu_tanh_mul", {&gate, &up, &out}) == Device::CPU, "gelu_tanh_mul: tensors on ",
                device_name(gate.device()),
                ": this op has only a CPU kernel in this build (Gemma 4 runs on the CPU only)");
  backend::cpu::gelu_tanh_mul({.gate = g.data,
                               .up = u.data,
                               .out = y.data,
                               .n_rows = g.n_rows,
                               .dim = g.dim,
                               .gate_stride = g.stride,
                               .up_stride = u.stride,
                               .out_stride = y.stride});
}

}  // namespace brioche::ops
