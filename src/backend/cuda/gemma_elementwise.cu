// Gemma's element-wise kernels on CUDA: the GELU (tanh form) gate and
// soft-capping (math in backend/cpu/gemma_elementwise.cpp, mirrored here in
// f32 so the CUDA forward follows the CPU reference closely).
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemma_kernels.h"

namespace brioche::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr int kThreads = 256;

// A 2-D grid: columns on x, rows strided on y (rows may be millions apart
// in memory: gate and up are often column ranges of one matrix).
dim3 rows_grid(int64_t n_rows, int64_t dim) {
  const unsigned x = unsigned((dim + kThreads - 1) / kThreads);
  const unsigned y = unsigned(n_rows < 65535 ? n_rows : 65535);
  return dim3(x, y, 1);
}

__global__ void gelu_tanh_mul_kernel(backend::cpu::GeluTanhMulArgs a) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.dim) return;
  for (int64_t r = blockIdx.y; r < a.n_rows; r += gridDim.y) {
    const float x = a.gate[r * a.gate_stride + c];
    const float u = a.up[r * a.up_stride + c];
    const float inner = kSqrt2OverPi * (x + kCubic * x * x * x);
    a.out[r * a.out_stride + c] = 0.5f * x * (1.0f + tanhf(inner)) * u;
  }
}

__global__ void softcap_kernel(backend::cpu::SoftcapArgs a) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.dim) return;
  for (int64_t r = blockIdx.y; r < a.n_rows; r += gridDim.y) {
    float* x = a.x + r * a.x_stride + c;
    *x = a.cap * tanhf(*x / a.cap);  // a division, as the CPU kernel and transformers
  }
}

}  // namespace

void gelu_tanh_mul(const backend::cpu::GeluTanhMulArgs& a) {
  if (a.n_rows == 0 || a.dim == 0) return;
  gelu_tanh_mul_kernel<<<rows_grid(a.n_rows, a.dim), kThreads, 0, detail::current_stream()>>>(a);
  CUDA_CHECK_LAUNCH();
}

void softcap(const backend::cpu::SoftcapArgs& a) {
  if (a.n_rows == 0 || a.dim == 0) return;
  softcap_kernel<<<rows_grid(a.n_rows, a.dim), kThreads, 0, detail::current_stream()>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace brioche::cuda
