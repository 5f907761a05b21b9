#include "ops/causal_conv1d_backward.h"

#include "backend/cpu/causal_conv1d_backward.h"
#include "ops/check_f32.h"

namespace brioche::ops {

void causal_conv1d_silu_backward(const Tensor& x, const Tensor& weight, std::span<const RecurrentSequence> sequences,
                                 const Tensor& dout, Tensor& dx, const ConvStateGrad& states) {
  constexpr const char* op = "causal_conv1d_backward";
  dx.note_written();
  auto xs = detail::f32_rows(x, op, "x");
  auto ws = detail::f32_rows(weight, op, "weight");
  auto ds = detail::f32_rows(dout, op, "dout");
  auto dxs = detail::f32_rows(dx, op, "dx");
  const int64_t channels = xs.dim, kernel = ws.dim;
  BRIOCHE_CHECK(ws.n_rows == channels && ws.stride == kernel && kernel >= 2, op, ": weight must be [", channels,
                ", K >= 2] contiguous, got ", weight.describe());
  for (const auto* t : {&ds, &dxs})
    BRIOCHE_CHECK(t->n_rows == xs.n_rows && t->dim == channels, op, ": dout ", dout.describe(), " and dx ",
                  dx.describe(), " must match x ", x.describe());
  BRIOCHE_CHECK(dx.data() != x.data() && dx.data() != dout.data(), op, ": dx must not alias x or dout");
  for (const RecurrentSequence& s : sequences) {
    BRIOCHE_CHECK(s.first_row >= 0 && s.n_rows >= 0 && s.first_row + s.n_rows <= xs.n_rows, op, ": sequence rows [",
                  s.first_row, ", ", s.first_row + s.n_rows, ") outside the batch of ", xs.n_rows);
    BRIOCHE_CHECK(s.starts || (states.state != nullptr && states.d_state != nullptr), op, ": the sequence at row ",
                  s.first_row, " continues a state, and no state and d_state were given");
  }
  const int64_t state_floats = (kernel - 1) * channels;
  for (const Tensor* t : {states.state, static_cast<const Tensor*>(states.d_state)}) {
    if (t == nullptr) continue;
    BRIOCHE_CHECK(
        t->dtype() == DType::F32 && t->is_contiguous() && t->device() == Device::CPU && t->numel() % state_floats == 0,
        op, ": the conv state must be f32 [n_slots, ", kernel - 1, ", ", channels, "] contiguous on the CPU, got ",
        t->describe());
    for (const RecurrentSequence& s : sequences)
      BRIOCHE_CHECK(s.starts || (s.state_slot >= 0 && s.state_slot < t->numel() / state_floats), op,
                    ": the conv state ", t->describe(), " has no slot ", s.state_slot, " (sequence at row ",
                    s.first_row, ")");
  }
  if (states.d_state != nullptr) states.d_state->note_written();
  BRIOCHE_CHECK(detail::common_device(op, {&x, &weight, &dout, &dx}) == Device::CPU, op,
                ": runs on the CPU only in this build");
  backend::cpu::causal_conv1d_silu_backward({.x = xs.data,
                                             .weight = ws.data,
                                             .dout = ds.data,
                                             .dx = dxs.data,
                                             .n_rows = xs.n_rows,
                                             .x_stride = xs.stride,
                                             .dout_stride = ds.stride,
                                             .dx_stride = dxs.stride,
                                             .channels = int(channels),
                                             .kernel = int(kernel),
                                             .sequences = sequences,
                                             .state = states.state ? states.state->data_as<float>() : nullptr,
                                             .d_state = states.d_state ? states.d_state->data_as<float>() : nullptr});
}

}  // namespace brioche::ops
