#include "ops/causal_conv1d.h"

#include "backend/cpu/causal_conv1d.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#endif

namespace brioche::ops {

void causal_conv1d_silu(const Tensor& x, const Tensor& weight, std::span<const RecurrentSequence> sequences,
                        Tensor& state, Tensor& out) {
  out.note_written();
  state.note_written();
  auto xs = detail::f32_rows(x, "causal_conv1d", "x");
  auto ws = detail::f32_rows(weight, "causal_conv1d", "weight");
  auto ys = detail::f32_rows(out, "causal_conv1d", "out");
  const int64_t channels = xs.dim, kernel = ws.dim;
  BRIOCHE_CHECK(ws.n_rows == channels && ws.stride == kernel && kernel >= 2, "causal_conv1d: weight must be [",
                channels, ", K >= 2] contiguous, got ", weight.describe());
  BRIOCHE_CHECK(ys.n_rows == xs.n_rows && ys.dim == channels, "causal_conv1d: out ", out.describe(),
                " does not match x ", x.describe());
  BRIOCHE_CHECK(x.data() != out.data(), "causal_conv1d: out must not alias x");
  BRIOCHE_CHECK(state.defined() && state.dtype() == DType::F32 && state.rank() == 3 && state.is_contiguous() &&
                    state.dim(1) == kernel - 1 && state.dim(2) == channels,
                "causal_conv1d: state must be contiguous f32 [slots, ", kernel - 1, ", ", channels, "], got ",
                state.defined() ? state.describe() : std::string("undefined"));
  for (const RecurrentSequence& s : sequences) {
    BRIOCHE_CHECK(s.first_row >= 0 && s.n_rows >= 0 && s.first_row + s.n_rows <= xs.n_rows,
                  "causal_conv1d: sequence rows [", s.first_row, ", ", s.first_row + s.n_rows,
                  ") outside the batch of ", xs.n_rows);
    BRIOCHE_CHECK(s.state_slot >= 0 && s.state_slot < state.dim(0), "causal_conv1d: state slot ", s.state_slot,
                  " outside [0, ", state.dim(0), ")");
  }
  check_splits_and_checkpoints(sequences, state.dim(0), "causal_conv1d");
  const backend::cpu::CausalConv1dArgs args{.x = xs.data,
                                            .weight = ws.data,
                                            .state = state.data_as<float>(),
                                            .out = ys.data,
                                            .x_stride = xs.stride,
                                            .out_stride = ys.stride,
                                            .channels = int(channels),
                                            .kernel = int(kernel),
                                            .sequences = sequences};
  if (detail::common_device("causal_conv1d", {&x, &weight, &state, &out}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::causal_conv1d_silu(args);
#else
    detail::fail_no_cuda("causal_conv1d");
#endif
  }
  backend::cpu::causal_conv1d_silu(args);
}

}  // namespace brioche::ops
