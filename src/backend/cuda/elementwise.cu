// Row-wise and element-wise kernels: RMSNorm, RoPE, residual add, bias,
// SwiGLU, softmax, argmax, the column split of a stacked GEMM's output. f32
// rows with a stride in floats (RMSNorm and SwiGLU can also write the 16-bit
// rows a GEMM reads, and SwiGLU read 16-bit GEMM outputs).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/graph.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/row_norm.cuh"
#include "backend/cuda/rows_vec4.cuh"
#include "backend/cuda/train_kernels.h"

namespace brioche::cuda {

namespace {

constexpr int kRowThreads = 256;

using detail::block_sum;

__device__ float block_max(float v) {
  __shared__ float partial[32];
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int n_warps = blockDim.x / 32;
  v = lane < n_warps ? partial[lane] : -INFINITY;
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// y = x · (mean(x²) + eps)^(−1/2) · w, one block per row (row_norm.cuh), into
// out (row stride a.out_stride elements of Out: f32, or the bf16/f16 rows a
// GEMM reads, rounded as convert_rows rounds; rows_vec4.cuh's stores).
template <typename Out>
__global__ void rms_norm_vec_kernel(backend::cpu::RmsNormArgs a, Out* out) {
  float4 g[detail::kRmsNormVec], v[detail::kRmsNormVec];
  detail::load_norm_weight(a.weight, a.dim, g);
  detail::pdl_prologue();
  detail::rms_norm_row(a.x + blockIdx.x * a.x_stride, g, a.dim, a.eps, v);
  Out* y = out + blockIdx.x * a.out_stride;
#pragma unroll
  for (int j = 0; j < detail::kRmsNormVec; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i < a.dim / 4) detail::store4(y + 4 * i, v[j]);
  }
}

// Any shape and alignment.
template <typename Out>
__global__ void rms_norm_kernel(backend::cpu::RmsNormArgs a, Out* out) {
  detail::pdl_prologue();
  const float* __restrict__ x = a.x + blockIdx.x * a.x_stride;
  Out* __restrict__ y = out + blockIdx.x * a.out_stride;
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < a.dim; i += blockDim.x) sq += x[i] * x[i];
  const float inv_rms = rsqrtf(block_sum(sq) / float(a.dim) + a.eps);
  for (int64_t i = threadIdx.x; i < a.dim; i += blockDim.x) detail::store1(y + i, x[i] * inv_rms * a.weight[i]);
}

// One thread per rotated pair (row, head, i).
__global__ void rope_kernel(backend::cpu::RopeArgs a, const int32_t* positions, const float* inv_freq) {
  detail::pdl_prologue();
  const int half = a.head_dim / 2;
  const int64_t pairs_per_row = int64_t(a.n_heads) * half;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.n_rows * pairs_per_row) return;
  const int64_t r = t / pairs_per_row;
  const int h = int((t % pairs_per_row) / half), i = int(t % half);
  detail::rope_pair(a.x + r * a.x_stride + int64_t(h) * a.head_dim, a.head_dim, a.interleaved, i, positions[r],
                    inv_freq);
}

__global__ void add_bias_kernel(float* x, const float* bias, int64_t n_rows, int64_t dim, int64_t stride) {
  detail::pdl_prologue();
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n_rows * dim) return;
  x[(t / dim) * stride + t % dim] += bias[t % dim];
}

// One thread per value of src's rows (grid y: the row), to the part whose
// columns hold it. The part is found with constant indices into `s`: a
// dynamic index into a kernel's parameters copies them to local memory in
// every thread, which made this 1.5 MB copy take 11.8 µs.
__global__ void split_columns_kernel(ColumnSplit s, int width) {
  detail::pdl_prologue();
  const int64_t r = blockIdx.y;
  const int c = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= width) return;
  const float v = s.src[r * s.src_stride + c];
  if (c < s.width[0]) {
    s.dst[0][r * s.dst_stride[0] + c] = v;
  } else if (s.n_parts == 2 || c < s.width[0] + s.width[1]) {
    s.dst[1][r * s.dst_stride[1] + (c - s.width[0])] = v;
  } else {
    s.dst[2][r * s.dst_stride[2] + (c - s.width[0] - s.width[1])] = v;
  }
}

__device__ __forceinline__ float silu_times(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

// out = op(a, b) element by element over rows: the residual add and SwiGLU.
// a and b are f32, or (SwiGLU after GEMMs with 16-bit outputs) bf16/f16,
// widened exactly; out is f32, or the bf16/f16 rows a tensor-core GEMM
// reads (the down projection; the training MLP's), rounded to nearest even.
template <typename In, typename Out>
struct Rows2 {
  const In* a;
  int64_t lda;
  const In* b;
  int64_t ldb;
  Out* out;
  int64_t ldo, n_rows, dim;
};

template <typename Op, typename In, typename Out>
__global__ void binary_rows_kernel(Rows2<In, Out> r, Op op) {
  detail::pdl_prologue();
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= r.n_rows * r.dim) return;
  const int64_t i = t / r.dim, c = t % r.dim;
  detail::store1(r.out + i * r.ldo + c, op(detail::load1(r.a + i * r.lda + c), detail::load1(r.b + i * r.ldb + c)));
}

// The same, one 16-byte load of each input per thread (rows_vec4.cuh): four
// f32 or eight 16-bit values.
template <typename Op, typename In, typename Out>
__global__ void binary_rows_vec_kernel(Rows2<In, Out> r, Op op) {
  constexpr int kWidth = detail::kValuesPer16Bytes<In>;
  detail::pdl_prologue();
  const int64_t c = detail::vec_column<kWidth>(r.dim);
  if (c < 0) return;
  for (int64_t i = blockIdx.y; i < r.n_rows; i += gridDim.y) {
    detail::Floats<kWidth> x = detail::load_vec(r.a + i * r.lda + c);
    const detail::Floats<kWidth> y = detail::load_vec(r.b + i * r.ldb + c);
#pragma unroll
    for (int j = 0; j < kWidth; ++j) x.v[j] = op(x.v[j], y.v[j]);
    detail::store_vec(r.out + i * r.ldo + c, x);
  }
}

struct AddOp {
  __device__ float operator()(float x, float y) const { return x + y; }
};
struct SiluTimesOp {
  __device__ float operator()(float g, float u) const { return silu_times(g, u); }
};

unsigned blocks_for(int64_t total, int threads = 256) { return unsigned((total + threads - 1) / threads); }

// The vector kernel when every row fits it (rows_fit_vec: 16-byte aligned
// rows of whole 16-byte groups of In; a 16-bit output of f32 inputs needs
// only 8-byte alignment, so the check is stricter than needed there), else
// the scalar one.
template <typename Op, typename In, typename Out>
void binary_rows(const Rows2<In, Out>& r, Op op) {
  if (r.n_rows * r.dim == 0) return;
  constexpr int kWidth = detail::kValuesPer16Bytes<In>;
  const void* ptrs[] = {r.a, r.b, r.out};
  const int64_t strides[] = {r.lda, r.ldb, r.ldo};
  if (detail::rows_fit_vec(kWidth, r.dim, ptrs, strides))
    return detail::launch_dependent(binary_rows_vec_kernel<Op, In, Out>, detail::vec_grid(r.n_rows, r.dim, kWidth),
                                    detail::kVecThreads, 0, r, op);
  detail::launch_dependent(binary_rows_kernel<Op, In, Out>, blocks_for(r.n_rows * r.dim), 256, 0, r, op);
}

__global__ void softmax_kernel(float* x, int64_t n, int64_t stride) {
  float* row = x + blockIdx.x * stride;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, row[i]);
  m = block_max(m);
  if (m == -INFINITY) {  // nothing visible
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) row[i] = 0.0f;
    return;
  }
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float e = expf(row[i] - m);
    row[i] = e;
    s += e;
  }
  const float inv = 1.0f / block_sum(s);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) row[i] *= inv;
}

// First index of the row maximum (NaN never wins).
__global__ void argmax_kernel(const float* logits, int64_t n, int64_t stride, int32_t* ids) {
  detail::pdl_prologue();
  const float* row = logits + blockIdx.x * stride;
  float best = -INFINITY;
  int64_t best_i = n;  // sentinel larger than any index
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = row[i];
    if (v > best) {
      best = v;
      best_i = i;
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, off);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, best_i, off);
    if (ov > best || (ov == best && oi < best_i)) {
      best = ov;
      best_i = oi;
    }
  }
  __shared__ float wv[32];
  __shared__ int64_t wi[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    wv[warp] = best;
    wi[warp] = best_i;
  }
  __syncthreads();
  if (warp == 0) {
    const int n_warps = blockDim.x / 32;
    best = lane < n_warps ? wv[lane] : -INFINITY;
    best_i = lane < n_warps ? wi[lane] : n;
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, off);
      const int64_t oi = __shfl_xor_sync(0xffffffffu, best_i, off);
      if (ov > best || (ov == best && oi < best_i)) {
        best = ov;
        best_i = oi;
      }
    }
    if (lane == 0) ids[blockIdx.x] = int32_t(best_i == n ? 0 : best_i);
  }
}

}  // namespace

namespace {

template <typename Out>
void launch_rms_norm(const backend::cpu::RmsNormArgs& a, Out* out) {
  if (a.n_rows == 0) return;
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  const bool vec = a.dim % 4 == 0 && a.x_stride % 4 == 0 && a.out_stride % 4 == 0 && aligned(a.x) && aligned(out) &&
                   aligned(a.weight);
  if (const int threads = detail::rms_norm_threads(a.dim); vec && threads > 0) {
    detail::launch_dependent(rms_norm_vec_kernel<Out>, unsigned(a.n_rows), threads, 0, a, out);
  } else {
    detail::launch_dependent(rms_norm_kernel<Out>, unsigned(a.n_rows), kRowThreads, 0, a, out);
  }
}

}  // namespace

void rms_norm(const backend::cpu::RmsNormArgs& a) { launch_rms_norm(a, a.out); }

void rms_norm_to_16bit(const backend::cpu::RmsNormArgs& a, void* out, bool to_f16) {
  backend::cpu::RmsNormArgs rows = a;
  rows.out = nullptr;
  rows.out_stride = a.dim;
  if (to_f16)
    launch_rms_norm(rows, static_cast<__half*>(out));
  else
    launch_rms_norm(rows, static_cast<__nv_bfloat16*>(out));
}

namespace detail {

RopeTables rope_tables(const backend::cpu::RopeArgs& a, const char* op) {
  const DecodeBinding* bound = decode_binding();
  BRIOCHE_CHECK(!bound || bound->n_rows == a.n_rows, op, ": ", a.n_rows, " rows but the decode binding has ",
                bound ? bound->n_rows : 0);
  return {bound ? bound->positions : static_cast<const int32_t*>(upload_cached(a.positions, size_t(a.n_rows) * 4)),
          static_cast<const float*>(upload_cached(a.inv_freq, size_t(a.head_dim / 2) * 4))};
}

}  // namespace detail

void rope(const backend::cpu::RopeArgs& a) {
  const int64_t total = a.n_rows * a.n_heads * (a.head_dim / 2);
  if (total == 0) return;
  const detail::RopeTables t = detail::rope_tables(a, "rope");
  detail::launch_dependent(rope_kernel, blocks_for(total), 256, 0, a, t.positions, t.inv_freq);
}

void add(const backend::cpu::AddArgs& a) {
  binary_rows(Rows2<float, float>{a.a, a.a_stride, a.b, a.b_stride, a.out, a.out_stride, a.n_rows, a.dim}, AddOp{});
}

void add_bias(float* x, const float* bias, int64_t n_rows, int64_t dim, int64_t x_stride) {
  const int64_t total = n_rows * dim;
  if (total == 0) return;
  detail::launch_dependent(add_bias_kernel, blocks_for(total), 256, 0, x, bias, n_rows, dim, x_stride);
}

void split_columns(const ColumnSplit& s) {
  BRIOCHE_CHECK(s.n_parts >= 1 && s.n_parts <= 3, "split_columns: 1 to 3 parts, got ", s.n_parts);
  BRIOCHE_CHECK(s.n_rows <= 65535, "split_columns: at most 65535 rows (grid y), got ", s.n_rows);
  int64_t width = 0;
  for (int p = 0; p < s.n_parts; ++p) width += s.width[p];
  if (s.n_rows * width == 0) return;
  const dim3 grid{unsigned((width + 255) / 256), unsigned(s.n_rows), 1u};
  detail::launch_dependent(split_columns_kernel, grid, 256, 0, s, int(width));
}

void swiglu(const backend::cpu::SwigluArgs& a) {
  binary_rows(Rows2<float, float>{a.gate, a.gate_stride, a.up, a.up_stride, a.out, a.out_stride, a.n_rows, a.dim},
              SiluTimesOp{});
}

namespace {

// SwiGLU of a's gate and up rows (of In: f32, or 16-bit GEMM outputs; a is
// SwigluArgs or Swiglu16bitArgs) into out [n_rows, dim] contiguous, in Out's
// type.
template <typename In, typename Out, typename Args>
void swiglu_into(const Args& a, void* out) {
  binary_rows(Rows2<In, Out>{static_cast<const In*>(a.gate), a.gate_stride, static_cast<const In*>(a.up), a.up_stride,
                             static_cast<Out*>(out), a.dim, a.n_rows, a.dim},
              SiluTimesOp{});
}

// The same into bf16, or f16 when to_f16.
template <typename In, typename Args>
void swiglu_into_16bit(const Args& a, void* out, bool to_f16) {
  if (to_f16)
    swiglu_into<In, __half>(a, out);
  else
    swiglu_into<In, __nv_bfloat16>(a, out);
}

}  // namespace

void swiglu_to_16bit(const backend::cpu::SwigluArgs& a, void* out, bool to_f16) {
  swiglu_into_16bit<float>(a, out, to_f16);
}

void swiglu_16bit_to_16bit(const Swiglu16bitArgs& a, void* out, bool to_f16) {
  if (a.f16)
    swiglu_into_16bit<__half>(a, out, to_f16);
  else
    swiglu_into_16bit<__nv_bfloat16>(a, out, to_f16);
}

void softmax(float* x, int64_t n_rows, int64_t n, int64_t stride) {
  if (n_rows == 0) return;
  softmax_kernel<<<unsigned(n_rows), 512, 0, detail::current_stream()>>>(x, n, stride);
  CUDA_CHECK_LAUNCH();
}

void argmax_rows(const float* logits, int64_t n_rows, int64_t n, int64_t stride, std::span<int32_t> ids) {
  BRIOCHE_CHECK(int64_t(ids.size()) == n_rows, "argmax_rows: ", ids.size(), " ids for ", n_rows, " rows");
  if (n_rows == 0) return;
  std::shared_ptr<void> dev = allocate(size_t(n_rows) * 4);
  detail::launch_dependent(argmax_kernel, unsigned(n_rows), 1024, 0, logits, n, stride,
                           static_cast<int32_t*>(dev.get()));
  copy_to_host(ids.data(), dev.get(), size_t(n_rows) * 4);
}

}  // namespace brioche::cuda
