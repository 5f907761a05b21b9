#include "ops/sigmoid_gate.h"

#include "backend/cpu/sigmoid_gate.h"
#include "ops/check_f32.h"

namespace brioche::ops {

void sigmoid_gate(const Tensor& gate, Tensor& x) {
  x.note_written();
  auto gs = detail::f32_rows(gate, "sigmoid_gate", "gate");
  auto xs = detail::f32_rows(x, "sigmoid_gate", "x");
  BRIOCHE_CHECK(gs.n_rows == xs.n_rows && (gs.dim == xs.dim || gs.dim == 1), "sigmoid_gate: gate ", gate.describe(),
                " must be [", xs.n_rows, ", ", xs.dim, "] or [", xs.n_rows, ", 1] for x ", x.describe());
  BRIOCHE_CHECK(detail::common_device("sigmoid_gate", {&gate, &x}) == Device::CPU,
                "sigmoid_gate: runs on the CPU only in this build");
  backend::cpu::sigmoid_gate({.gate = gs.data,
                              .x = xs.data,
                              .n_rows = xs.n_rows,
                              .dim = xs.dim,
                              .gate_stride = gs.stride,
                              .x_stride = xs.stride,
                              .per_row = gs.dim != xs.dim});
}

}  // namespace brioche::ops
