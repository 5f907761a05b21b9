// CUDA kernel of ops::causal_conv1d_silu (the math in ops/causal_conv1d.h):
// a thread per (sequence, channel) walks the sequence's rows in order with
// the last K-1 inputs in registers (loaded from the state slot, or zeros for
// a sequence that starts), so prefill and a decode step are one kernel;
// checkpoints write the window as it is before their position, and the
// window after the last row goes back to the slot. Neighbouring threads
// take neighbouring channels: every load and store is coalesced.
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace brioche::cuda {

namespace {

struct ConvKernelArgs {
  const float* x;       // [n_rows, channels], row stride x_stride floats
  const float* weight;  // [channels, K]
  float* state;         // [n_slots, K - 1, channels]
  float* out;           // [n_rows, channels], row stride out_stride floats
  int64_t x_stride, out_stride;
  int channels;
  const int32_t* sequences;    // [n_sequences][6]: first row, rows, slot, starts, first checkpoint, end checkpoint
  const int32_t* checkpoints;  // [n_checkpoints][2]: row offset in its sequence, slot
};

// Grid (channel blocks, sequences).
template <int K>
__global__ void causal_conv1d_silu_kernel(ConvKernelArgs a) {
  constexpr int kHistory = K - 1;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= a.channels) return;
  const int32_t* seq = a.sequences + 6 * blockIdx.y;
  const int32_t first_row = seq[0], n_rows = seq[1], slot = seq[2];
  float w[K], window[kHistory];
#pragma unroll
  for (int j = 0; j < K; ++j) w[j] = a.weight[int64_t(c) * K + j];
  const int64_t slot_floats = int64_t(kHistory) * a.channels;
  float* own = a.state + slot * slot_floats + c;
#pragma unroll
  for (int j = 0; j < kHistory; ++j) window[j] = seq[3] != 0 ? 0.0f : own[int64_t(j) * a.channels];
  int32_t cp = seq[4];
  auto take_checkpoints = [&](int32_t offset) {
    for (; cp < seq[5] && a.checkpoints[2 * cp] == offset; ++cp) {
      float* copy = a.state + a.checkpoints[2 * cp + 1] * slot_floats + c;
#pragma unroll
      for (int j = 0; j < kHistory; ++j) copy[int64_t(j) * a.channels] = window[j];
    }
  };
  for (int32_t t = 0; t < n_rows; ++t) {
    take_checkpoints(t);
    const float x = a.x[(first_row + t) * a.x_stride + c];
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kHistory; ++j) acc = fmaf(w[j], window[j], acc);
    acc = fmaf(w[kHistory], x, acc);
    a.out[(first_row + t) * a.out_stride + c] = acc / (1.0f + expf(-acc));
#pragma unroll
    for (int j = 0; j + 1 < kHistory; ++j) window[j] = window[j + 1];
    window[kHistory - 1] = x;
  }
  take_checkpoints(n_rows);
#pragma unroll
  for (int j = 0; j < kHistory; ++j) own[int64_t(j) * a.channels] = window[j];
}

}  // namespace

void causal_conv1d_silu(const backend::cpu::CausalConv1dArgs& a) {
  if (a.sequences.empty() || a.channels == 0) return;
  BRIOCHE_CHECK(a.sequences.size() <= 65535, "causal_conv1d (cuda): at most 65535 sequences (grid y), got ",
                a.sequences.size());
  std::vector<int32_t> seqs, cps;
  for (const ops::RecurrentSequence& s : a.sequences) {
    const int32_t cp_begin = int32_t(cps.size() / 2);
    for (const ops::StateCheckpoint& cp : s.checkpoints)
      cps.insert(cps.end(), {cp.position - s.first_position, cp.slot});
    seqs.insert(seqs.end(), {s.first_row, s.n_rows, s.state_slot, s.starts ? 1 : 0, cp_begin, int32_t(cps.size() / 2)});
  }
  const int32_t cps_at = int32_t(seqs.size());
  seqs.insert(seqs.end(), cps.begin(), cps.end());
  const auto* words = static_cast<const int32_t*>(upload_cached(seqs.data(), seqs.size() * sizeof(int32_t)));
  const ConvKernelArgs args{.x = a.x,
                            .weight = a.weight,
                            .state = a.state,
                            .out = a.out,
                            .x_stride = a.x_stride,
                            .out_stride = a.out_stride,
                            .channels = a.channels,
                            .sequences = words,
                            .checkpoints = words + cps_at};
  constexpr int kBlock = 128;
  const dim3 grid{unsigned((a.channels + kBlock - 1) / kBlock), unsigned(a.sequences.size()), 1u};
  cudaStream_t s = detail::current_stream();
  switch (a.kernel) {
    case 2: causal_conv1d_silu_kernel<2><<<grid, kBlock, 0, s>>>(args); break;
    case 3: causal_conv1d_silu_kernel<3><<<grid, kBlock, 0, s>>>(args); break;
    case 4: causal_conv1d_silu_kernel<4><<<grid, kBlock, 0, s>>>(args); break;
    case 5: causal_conv1d_silu_kernel<5><<<grid, kBlock, 0, s>>>(args); break;
    case 6: causal_conv1d_silu_kernel<6><<<grid, kBlock, 0, s>>>(args); break;
    case 7: causal_conv1d_silu_kernel<7><<<grid, kBlock, 0, s>>>(args); break;
    case 8: causal_conv1d_silu_kernel<8><<<grid, kBlock, 0, s>>>(args); break;
    default: fail("causal_conv1d (cuda): kernel sizes 2 to 8, got ", a.kernel);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace brioche::cuda
