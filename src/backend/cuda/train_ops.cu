// Row and parameter kernels of training: dropout, scaled add, scale, row
// gather/scatter, AdamW and the squared gradient norm (math in ops/*.h).
#include <algorithm>
#include <numeric>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/train_kernels.h"
#include "core/dropout_hash.h"

namespace brioche::cuda {

namespace {

using backend::cpu::AdamWConstants;
using backend::cpu::AdamWTensor;
using backend::cpu::F32Block;

unsigned blocks_for(int64_t total, int threads = 256) { return unsigned((total + threads - 1) / threads); }

__global__ void dropout_kernel(backend::cpu::DropoutArgs a) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.n_rows * a.dim) return;
  const int64_t r = t / a.dim, c = t % a.dim;
  a.dst[r * a.ld_dst + c] = a.src[r * a.ld_src + c] * dropout_factor(a.key, a.p, a.first_row + r, c);
}

__global__ void add_scaled_kernel(backend::cpu::ScaledAddArgs a) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.n_rows * a.dim) return;
  const int64_t r = t / a.dim, c = t % a.dim;
  a.y[r * a.ldy + c] += a.s * a.x[r * a.ldx + c];
}

__global__ void scale_kernel(backend::cpu::ScaleArgs a) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.n_rows * a.dim) return;
  a.x[(t / a.dim) * a.ldx + t % a.dim] *= a.s;
}

__global__ void fill_kernel(backend::cpu::ScaleArgs a) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.n_rows * a.dim) return;
  a.x[(t / a.dim) * a.ldx + t % a.dim] = a.s;
}

__global__ void gather_rows_kernel(const float* src, int64_t ld_src, const int32_t* rows, float* dst, int64_t ld_dst,
                                   int64_t n, int64_t dim) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n * dim) return;
  const int64_t i = t / dim, c = t % dim;
  dst[i * ld_dst + c] = src[int64_t(rows[i]) * ld_src + c];
}

// Block b owns destination row dst_rows[b] and adds its sources
// sources[offsets[b] .. offsets[b+1]) in ascending order, column by column.
__global__ void scatter_add_rows_kernel(const float* src, int64_t ld_src, float* dst, int64_t ld_dst, int64_t dim,
                                        const int32_t* dst_rows, const int32_t* offsets, const int32_t* sources) {
  float* out = dst + int64_t(dst_rows[blockIdx.x]) * ld_dst;
  const int32_t begin = offsets[blockIdx.x], end = offsets[blockIdx.x + 1];
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    float acc = out[c];
    for (int32_t j = begin; j < end; ++j) acc += src[int64_t(sources[j]) * ld_src + c];
    out[c] = acc;
  }
}

// blockIdx.y: the tensor; a grid-stride loop over its elements.
__global__ void adamw_kernel(const AdamWTensor* tensors, AdamWConstants k) {
  const AdamWTensor t = tensors[blockIdx.y];
  const float b1 = k.beta1, b2 = k.beta2;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < t.n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = k.grad_scale == 1.0f ? t.grad[i] : t.grad[i] * k.grad_scale;
    float p = t.param[i];
    p -= t.lr * k.weight_decay * p;
    const float m = b1 * t.m[i] + (1.0f - b1) * g;
    const float v = b2 * t.v[i] + (1.0f - b2) * g * g;
    p -= t.lr * (m / k.c1) / (sqrtf(v / k.c2) + k.eps);
    t.m[i] = m;
    t.v[i] = v;
    t.param[i] = p;
  }
}

constexpr int kNormBlocks = 64;  // per tensor: fixed, so the partial sums' order is too
constexpr int kNormThreads = 256;

// partials[blockIdx.y · kNormBlocks + blockIdx.x] = Σ x² over this block's grid-stride share.
__global__ void sum_squares_kernel(const F32Block* blocks, double* partials) {
  const F32Block b = blocks[blockIdx.y];
  double s = 0.0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < b.n; i += int64_t(gridDim.x) * blockDim.x) {
    const double v = b.data[i];
    s += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  __shared__ double warp_sums[kNormThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kNormThreads / 32; ++w) total += warp_sums[w];
    partials[int64_t(blockIdx.y) * kNormBlocks + blockIdx.x] = total;
  }
}

}  // namespace

void dropout(const backend::cpu::DropoutArgs& a) {
  const int64_t total = a.n_rows * a.dim;
  if (total == 0) return;
  dropout_kernel<<<blocks_for(total), 256, 0, detail::current_stream()>>>(a);
  CUDA_CHECK_LAUNCH();
}

void add_scaled(const backend::cpu::ScaledAddArgs& a) {
  const int64_t total = a.n_rows * a.dim;
  if (total == 0) return;
  add_scaled_kernel<<<blocks_for(total), 256, 0, detail::current_stream()>>>(a);
  CUDA_CHECK_LAUNCH();
}

void scale(const backend::cpu::ScaleArgs& a) {
  const int64_t total = a.n_rows * a.dim;
  if (total == 0) return;
  scale_kernel<<<blocks_for(total), 256, 0, detail::current_stream()>>>(a);
  CUDA_CHECK_LAUNCH();
}

void fill(const backend::cpu::ScaleArgs& a) {
  const int64_t total = a.n_rows * a.dim;
  if (total == 0) return;
  fill_kernel<<<blocks_for(total), 256, 0, detail::current_stream()>>>(a);
  CUDA_CHECK_LAUNCH();
}

void gather_rows(const backend::cpu::RowIndexArgs& a) {
  const int64_t total = a.n * a.dim;
  if (total == 0) return;
  auto* rows = static_cast<const int32_t*>(upload_cached(a.rows, size_t(a.n) * 4));
  gather_rows_kernel<<<blocks_for(total), 256, 0, detail::current_stream()>>>(a.src, a.ld_src, rows, a.dst, a.ld_dst,
                                                                              a.n, a.dim);
  CUDA_CHECK_LAUNCH();
}

void scatter_add_rows(const backend::cpu::RowIndexArgs& a) {
  if (a.n == 0 || a.dim == 0) return;
  // Sources grouped by destination row, ascending within a group (stable sort).
  std::vector<int32_t> order(size_t(a.n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return a.rows[x] < a.rows[y]; });
  std::vector<int32_t> dst_rows, offsets;
  for (size_t j = 0; j < order.size(); ++j) {
    if (j == 0 || a.rows[order[j]] != a.rows[order[j - 1]]) {
      dst_rows.push_back(a.rows[order[j]]);
      offsets.push_back(int32_t(j));
    }
  }
  offsets.push_back(int32_t(order.size()));
  // One upload: [dst_rows | offsets | sources]
  std::vector<int32_t> table;
  table.reserve(dst_rows.size() + offsets.size() + order.size());
  table.insert(table.end(), dst_rows.begin(), dst_rows.end());
  table.insert(table.end(), offsets.begin(), offsets.end());
  table.insert(table.end(), order.begin(), order.end());
  auto* dev = static_cast<const int32_t*>(upload_cached(table.data(), table.size() * 4));
  const size_t groups = dst_rows.size();
  scatter_add_rows_kernel<<<unsigned(groups), 256, 0, detail::current_stream()>>>(
      a.src, a.ld_src, a.dst, a.ld_dst, a.dim, dev, dev + groups, dev + 2 * groups + 1);
  CUDA_CHECK_LAUNCH();
}

void adamw_step(std::span<const AdamWTensor> tensors, const AdamWConstants& k) {
  if (tensors.empty()) return;
  BRIOCHE_CHECK(tensors.size() <= 65535, "adamw_step: at most 65535 tensors per call, got ", tensors.size());
  int64_t largest = 0;
  for (const AdamWTensor& t : tensors) largest = std::max(largest, t.n);
  if (largest == 0) return;
  auto* table = static_cast<const AdamWTensor*>(upload_cached(tensors.data(), tensors.size_bytes()));
  const dim3 grid(std::min(blocks_for(largest), 1024u), unsigned(tensors.size()));
  adamw_kernel<<<grid, 256, 0, detail::current_stream()>>>(table, k);
  CUDA_CHECK_LAUNCH();
}

double sum_of_squares(std::span<const F32Block> blocks) {
  if (blocks.empty()) return 0.0;
  BRIOCHE_CHECK(blocks.size() <= 65535, "sum_of_squares: at most 65535 tensors per call, got ", blocks.size());
  auto* table = static_cast<const F32Block*>(upload_cached(blocks.data(), blocks.size_bytes()));
  const size_t n_partials = blocks.size() * kNormBlocks;
  std::shared_ptr<void> partials = allocate(n_partials * sizeof(double));
  sum_squares_kernel<<<dim3(kNormBlocks, unsigned(blocks.size())), kNormThreads, 0, detail::current_stream()>>>(
      table, static_cast<double*>(partials.get()));
  CUDA_CHECK_LAUNCH();
  std::vector<double> host(n_partials);
  copy_to_host(host.data(), partials.get(), n_partials * sizeof(double));
  double sum = 0.0;
  for (double p : host) sum += p;
  return sum;
}

}  // namespace brioche::cuda
