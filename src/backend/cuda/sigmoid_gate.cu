// CUDA kernel of ops::sigmoid_gate: x ← x · sigmoid(gate), per element or
// with one gate per row (backend/cpu/sigmoid_gate.cpp's arithmetic).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace brioche::cuda {

namespace {

__global__ void sigmoid_gate_kernel(backend::cpu::SigmoidGateArgs a) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.n_rows * a.dim) return;
  const int64_t r = t / a.dim, i = t % a.dim;
  const float g = a.gate[r * a.gate_stride + (a.per_row ? 0 : i)];
  a.x[r * a.x_stride + i] *= 1.0f / (1.0f + expf(-g));
}

}  // namespace

void sigmoid_gate(const backend::cpu::SigmoidGateArgs& a) {
  const int64_t total = a.n_rows * a.dim;
  if (total == 0) return;
  sigmoid_gate_kernel<<<unsigned((total + 255) / 256), 256, 0, detail::current_stream()>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace brioche::cuda
