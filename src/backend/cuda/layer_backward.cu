// Backward of RMSNorm and SwiGLU on the device (the math:
// ops/layer_backward.h). RoPE's backward is ops::rope at negated positions.
#include <cuda_bf16.h>

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/rows_vec4.cuh"
#include "backend/cuda/train_kernels.h"

namespace brioche::cuda {

namespace {

constexpr int kRowThreads = 256;

// Sums of two values over the block (blockDim.x a multiple of 32).
__device__ float2 block_sum2(float2 v) {
  __shared__ float2 partial[32];
  for (int off = 16; off > 0; off >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, off);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, off);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x / 32) ? partial[lane] : make_float2(0.0f, 0.0f);
  for (int off = 16; off > 0; off >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, off);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, off);
  }
  return v;
}

// One block per row: r = (Σx²/D + eps)^(−1/2),  dx += r·w·dy − x·r³·(Σ w·dy·x)/D
__global__ void rms_norm_backward_kernel(backend::cpu::RmsNormBackwardArgs a) {
  const float* __restrict__ x = a.x + blockIdx.x * a.x_stride;
  const float* __restrict__ dy = a.dy + blockIdx.x * a.dy_stride;
  float* __restrict__ dx = a.dx + blockIdx.x * a.dx_stride;
  float2 sums = make_float2(0.0f, 0.0f);  // (Σ x², Σ w·dy·x)
  for (int64_t i = threadIdx.x; i < a.dim; i += blockDim.x) {
    const float xi = x[i];
    sums.x += xi * xi;
    sums.y += a.weight[i] * dy[i] * xi;
  }
  sums = block_sum2(sums);
  const float r = rsqrtf(sums.x / float(a.dim) + a.eps);
  const float c2 = r * r * r * sums.y / float(a.dim);
  for (int64_t i = threadIdx.x; i < a.dim; i += blockDim.x) dx[i] += r * a.weight[i] * dy[i] - c2 * x[i];
}

// d silu(g)·u: du = d·g·σ(g),  dg = d·u·σ(g)·(1 + g·(1 − σ(g)))
__device__ __forceinline__ void swiglu_grads(float g, float u, float d, float& dg, float& du) {
  const float sig = 1.0f / (1.0f + expf(-g));
  du = d * g * sig;
  dg = d * u * sig * (1.0f + g * (1.0f - sig));
}

// swiglu_backward's operands with the gradients' element type (f32, or bf16
// for the training MLP's tensor cores).
template <typename Out>
struct SwigluGrads {
  const float *gate, *up, *dout;
  Out *dgate, *dup;
  int64_t n_rows, dim, ld_gate, ld_up, ld_dout, ld_dgate, ld_dup;
};

template <typename Out>
__global__ void swiglu_backward_kernel(SwigluGrads<Out> a) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.n_rows * a.dim) return;
  const int64_t r = t / a.dim, c = t % a.dim;
  const float g = a.gate[r * a.ld_gate + c], u = a.up[r * a.ld_up + c], d = a.dout[r * a.ld_dout + c];
  float dg, du;
  swiglu_grads(g, u, d, dg, du);
  detail::store1(a.dup + r * a.ld_dup + c, du);  // written after reading dout: dgate/dup may alias it
  detail::store1(a.dgate + r * a.ld_dgate + c, dg);
}

template <typename Out>
__global__ void swiglu_backward_vec4_kernel(SwigluGrads<Out> a) {
  const int64_t c = detail::vec_column<4>(a.dim);
  if (c < 0) return;
  for (int64_t r = blockIdx.y; r < a.n_rows; r += gridDim.y) {
    const float4 g = detail::load4(a.gate + r * a.ld_gate + c), u = detail::load4(a.up + r * a.ld_up + c);
    const float4 d = detail::load4(a.dout + r * a.ld_dout + c);
    float4 dg, du;
    swiglu_grads(g.x, u.x, d.x, dg.x, du.x);
    swiglu_grads(g.y, u.y, d.y, dg.y, du.y);
    swiglu_grads(g.z, u.z, d.z, dg.z, du.z);
    swiglu_grads(g.w, u.w, d.w, dg.w, du.w);
    detail::store4(a.dup + r * a.ld_dup + c, du);  // all of dout is read: dgate/dup may alias it
    detail::store4(a.dgate + r * a.ld_dgate + c, dg);
  }
}

template <typename Out>
void launch_swiglu_backward(const SwigluGrads<Out>& a) {
  const int64_t total = a.n_rows * a.dim;
  if (total == 0) return;
  const void* ptrs[] = {a.gate, a.up, a.dout, a.dgate, a.dup};
  const int64_t strides[] = {a.ld_gate, a.ld_up, a.ld_dout, a.ld_dgate, a.ld_dup};
  if (detail::rows_fit_vec(4, a.dim, ptrs, strides)) {
    swiglu_backward_vec4_kernel<Out>
        <<<detail::vec_grid(a.n_rows, a.dim, 4), detail::kVecThreads, 0, detail::current_stream()>>>(a);
  } else {
    swiglu_backward_kernel<Out><<<unsigned((total + 255) / 256), 256, 0, detail::current_stream()>>>(a);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rms_norm_backward(const backend::cpu::RmsNormBackwardArgs& a) {
  if (a.n_rows == 0 || a.dim == 0) return;
  const int threads = a.dim >= 4096 ? 1024 : kRowThreads;
  rms_norm_backward_kernel<<<unsigned(a.n_rows), threads, 0, detail::current_stream()>>>(a);
  CUDA_CHECK_LAUNCH();
}

void swiglu_backward(const backend::cpu::SwigluBackwardArgs& a) {
  launch_swiglu_backward(SwigluGrads<float>{a.gate, a.up, a.dout, a.dgate, a.dup, a.n_rows, a.dim, a.ld_gate, a.ld_up,
                                            a.ld_dout, a.ld_dgate, a.ld_dup});
}

void swiglu_backward_to_bf16(const backend::cpu::SwigluBackwardArgs& a, void* dgate, void* dup) {
  launch_swiglu_backward(SwigluGrads<__nv_bfloat16>{a.gate, a.up, a.dout, static_cast<__nv_bfloat16*>(dgate),
                                                    static_cast<__nv_bfloat16*>(dup), a.n_rows, a.dim, a.ld_gate,
                                                    a.ld_up, a.ld_dout, a.dim, a.dim});
}

}  // namespace brioche::cuda
