// Shrink: u[row, k] = A_seg[k]·x[row]      one block of kShrinkThreads per (row, k)
// Expand: y[row, c] += Σ_k u[row, k]·bt_seg[k, c]   one thread per (row, c)
// A decode step has a handful of rows, so the shrink's parallelism has to come
// from the reduction over `in` itself: a block per (row, k) keeps every SM busy
// at batch 1, where a warp per (row, k) left a down projection (in = 14,336)
// latency-bound on a few SMs for 32 layers in a row.
// Segments travel in the kernel parameters (up to kSegmentsPerLaunch per
// launch), so a launch needs no upload and a row finds its segment by a scan
// of a few entries.
// The table path reads a row's adapter slot and the slot's factors from
// device memory instead (what a decode graph replays with a new mix), and
// covers up to three projections of one x per launch; past a handful of rows
// a table shrink block takes several ranks of one (row, part) with one read
// of x (lora_table_shrink). Both paths reduce through block_dots, so both
// give the same bits, whatever the batch.
// All four kernels are dependent launches (launch.cuh), so the adapted layer
// stays one PDL chain with the GEMVs around it; a shrink block prefetches its
// rows of A into L2 before its wait, while the GEMV before it still runs, and
// an expand thread loads its column of Bᵀ into registers there. The
// adapter table is written only by host copies queued before the step, so
// reading it before the wait is as safe as reading a weight.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/lora_rows.h"
#include <algorithm>
#include <climits>

#include <cuda_fp16.h>

namespace brioche::cuda {

namespace {

using backend::cpu::LoraRowsArgs;
using backend::cpu::LoraRowsSegment;

constexpr int kSegmentsPerLaunch = 48;

struct SegmentTable {
  LoraRowsSegment seg[kSegmentsPerLaunch];
  int32_t n;
};

__device__ const LoraRowsSegment* segment_of(const SegmentTable& t, int32_t row) {
  for (int32_t s = 0; s < t.n; ++s)
    if (row >= t.seg[s].first_row && row < t.seg[s].first_row + t.seg[s].n_rows) return &t.seg[s];
  return nullptr;
}

constexpr int kShrinkThreads = 512;

// G dot products over `in` values by the whole block, with one read of x:
//   sums[j] = Σ_i a_j[i]·x[i]            a_j = a + j·in, for j < n (the rest stay 0)
// and with a norm weight w (kNorm)
//   sums[j] = Σ_i a_j[i]·w[i]·x[i],  sums[G] = Σ_i x[i]²
// Each thread sums a strided share, then warps reduce by shuffles and warp 0
// sums the warps' results, always in the same order, so a product's bits do
// not depend on G. The sums are valid in thread 0.
template <int G, bool kNorm>
__device__ void block_dots(const __half* a, int n, const float* w, const float* x, int64_t in, float (&sums)[G + 1]) {
  __shared__ float warp_sums[kShrinkThreads / 32][G + 1];
  for (int j = 0; j <= G; ++j) sums[j] = 0.0f;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < in; i += kShrinkThreads) {
    const float xi = x[i];
    const float wi = kNorm ? w[i] : 1.0f;
#pragma unroll
    for (int j = 0; j < G; ++j)
      if (j < n) sums[j] += kNorm ? __half2float(a[j * in + i]) * wi * xi : __half2float(a[j * in + i]) * xi;
    if (kNorm) sums[G] += xi * xi;
  }
#pragma unroll
  for (int j = 0; j <= G; ++j) {
    for (int offset = 16; offset > 0; offset /= 2) sums[j] += __shfl_down_sync(0xffffffffu, sums[j], offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32][j] = sums[j];
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;
#pragma unroll
  for (int j = 0; j <= G; ++j) {
    sums[j] = threadIdx.x < kShrinkThreads / 32 ? warp_sums[threadIdx.x][j] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) sums[j] += __shfl_down_sync(0xffffffffu, sums[j], offset);
  }
}

__device__ float block_dot(const __half* a, const float* x, int64_t in) {
  float sums[2];
  block_dots<1, false>(a, 1, nullptr, x, in, sums);
  return sums[0];
}

// n rows of A from row k into L2 (bulk prefetches take 16-byte multiples
// at 16-byte aligned addresses: every row of A is, when `in` is a multiple
// of 8).
__device__ void prefetch_a_rows(const __half* a_rows, int n, int64_t in) {
  if (threadIdx.x == 0 && in % 8 == 0 && reinterpret_cast<uintptr_t>(a_rows) % 16 == 0)
    detail::prefetch_l2(a_rows, uint32_t(n * in * sizeof(__half)));
}

// grid (rows, max_rank), kShrinkThreads threads: one block per (row, k).
__global__ void shrink_kernel(const float* x, int64_t ldx, float* u, int64_t ldu, int64_t in, int32_t first_row,
                              const __grid_constant__ SegmentTable table) {
  const int32_t row = first_row + int32_t(blockIdx.x);
  const LoraRowsSegment* seg = segment_of(table, row);
  const int32_t k = int32_t(blockIdx.y);
  const bool active = seg != nullptr && k < seg->rank;
  const __half* a_row = active ? reinterpret_cast<const __half*>(seg->a) + int64_t(k) * in : nullptr;
  if (active) prefetch_a_rows(a_row, 1, in);
  detail::pdl_prologue();
  if (!active) return;
  const float sum = block_dot(a_row, x + int64_t(row) * ldx, in);
  if (threadIdx.x == 0) u[int64_t(row) * ldu + k] = sum;
}

// A low-rank term's factors for one output column c: Bᵀ's first ranks are
// weights, so they are loaded before the wait, behind the kernel before this
// one; u (the shrink's output) is read after it. Then the step pays no L2
// round trip per rank, only one for u.
//   term = Σ_k u[k]·bt[k, c]        k ascending, whatever the rank (same bits)
constexpr int kRanksBeforeWait = 16;

struct TermColumn {
  const __half* bt;  // bt[k, c] at bt[k · out]; null: no term
  int64_t out;
  int32_t rank;
  __half early[kRanksBeforeWait];
};

__device__ TermColumn load_term_column(const void* bt, int64_t out, int32_t rank, int64_t c) {
  TermColumn t;
  t.bt = bt != nullptr ? reinterpret_cast<const __half*>(bt) + c : nullptr;
  t.out = out;
  t.rank = t.bt != nullptr ? rank : 0;
#pragma unroll
  for (int k = 0; k < kRanksBeforeWait; ++k)
    if (k < t.rank) t.early[k] = t.bt[int64_t(k) * out];
  return t;
}

__device__ float finish_term(const TermColumn& t, const float* ur) {
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kRanksBeforeWait; ++k)
    if (k < t.rank) sum += ur[k] * __half2float(t.early[k]);
#pragma unroll 8
  for (int32_t k = kRanksBeforeWait; k < t.rank; ++k) sum += ur[k] * __half2float(t.bt[int64_t(k) * t.out]);
  return sum;
}

// grid (rows, ceil(out / 256)), 256 threads, one output column each.
__global__ void expand_kernel(const float* u, int64_t ldu, float* y, int64_t ldy, int64_t out, int32_t first_row,
                              const __grid_constant__ SegmentTable table) {
  const int32_t row = first_row + int32_t(blockIdx.x);
  const LoraRowsSegment* seg = segment_of(table, row);
  const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  const bool active = seg != nullptr && c < out;
  const TermColumn t = load_term_column(active ? seg->bt : nullptr, out, active ? seg->rank : 0, c);
  detail::pdl_prologue();
  if (!active) return;
  y[int64_t(row) * ldy + c] += finish_term(t, u + int64_t(row) * ldu);
}

}  // namespace

void lora_rows_add(const LoraRowsArgs& a) {
  for (int32_t first = 0; first < a.n_segments; first += kSegmentsPerLaunch) {
    SegmentTable table{};
    table.n = std::min(kSegmentsPerLaunch, a.n_segments - first);
    int32_t lo = INT32_MAX, hi = 0, max_rank = 0;
    for (int32_t s = 0; s < table.n; ++s) {
      const LoraRowsSegment& seg = a.segments[first + s];
      table.seg[s] = seg;
      lo = std::min(lo, seg.first_row);
      hi = std::max(hi, seg.first_row + seg.n_rows);
      max_rank = std::max(max_rank, seg.rank);
    }
    if (hi <= lo || max_rank == 0) continue;
    const unsigned rows = unsigned(hi - lo);
    detail::launch_dependent(shrink_kernel, dim3(rows, unsigned(max_rank)), dim3(kShrinkThreads), 0, a.x, a.ldx, a.u,
                             a.ldu, a.in, lo, table);
    detail::launch_dependent(expand_kernel, dim3(rows, unsigned((a.out + 255) / 256)), dim3(256), 0, a.u, a.ldu, a.y,
                             a.ldy, a.out, lo, table);
  }
}

namespace {

using backend::cpu::LoraFactors;
using backend::cpu::LoraTableArgs;

// grid (rows, parts · groups), kShrinkThreads threads: one block per (row,
// part, group of G ranks).
template <int G>
__global__ void table_shrink_kernel(LoraTableArgs a, int32_t groups) {
  const int32_t row = int32_t(blockIdx.x);
  const int32_t slot = a.row_slot[row];
  const int32_t p = int32_t(blockIdx.y) / groups;
  const int32_t k0 = int32_t(blockIdx.y) % groups * G;
  const LoraFactors f = slot >= 0 ? a.factors[int64_t(slot) * a.slot_stride + a.entry[p]] : LoraFactors{};
  const int n = f.a != nullptr ? min(G, f.rank - k0) : 0;
  const __half* a_rows = n > 0 ? reinterpret_cast<const __half*>(f.a) + int64_t(k0) * a.in : nullptr;
  if (n > 0) prefetch_a_rows(a_rows, n, a.in);
  detail::pdl_prologue();
  if (n <= 0) return;
  const float* x = a.x + int64_t(row) * a.ldx;
  float sums[G + 1];
  float scale = 1.0f;
  if (a.norm_w != nullptr) {  // u = rstd·Σ A·w·x (LoraTableArgs::norm_w)
    block_dots<G, true>(a_rows, n, a.norm_w, x, a.in, sums);
    scale = rsqrtf(sums[G] / float(a.in) + a.norm_eps);
  } else {
    block_dots<G, false>(a_rows, n, nullptr, x, a.in, sums);
  }
  if (threadIdx.x != 0) return;
  float* u = a.u + int64_t(row) * a.ldu + int64_t(p) * a.rank_cap + k0;
#pragma unroll
  for (int j = 0; j < G; ++j)
    if (j < n) u[j] = sums[j] * scale;
}

// Part p's term column of a row through the row's slot (slot < 0 or a part
// the adapter does not target: no term). The adapter table is read before the
// wait, as the shrink does.
__device__ TermColumn load_table_column(const LoraTableArgs& a, int32_t slot, int32_t p, int64_t c) {
  if (slot < 0 || c >= a.out[p]) return load_term_column(nullptr, 0, 0, 0);
  const LoraFactors f = a.factors[int64_t(slot) * a.slot_stride + a.entry[p]];
  return load_term_column(f.a != nullptr ? f.bt : nullptr, a.out[p], f.rank, c);
}

__device__ const float* table_u(const LoraTableArgs& a, int32_t row, int32_t p) {
  return a.u + int64_t(row) * a.ldu + int64_t(p) * a.rank_cap;
}

// grid (rows, parts · ceil(max out / 256)), 256 threads, one output column each.
__global__ void table_expand_kernel(LoraTableArgs a, int32_t column_blocks) {
  const int32_t row = int32_t(blockIdx.x);
  const int32_t p = int32_t(blockIdx.y) / column_blocks;
  const int64_t c = int64_t(int32_t(blockIdx.y) % column_blocks) * blockDim.x + threadIdx.x;
  const TermColumn t = load_table_column(a, a.row_slot[row], p, c);
  detail::pdl_prologue();
  if (t.bt == nullptr) return;
  a.y[p][int64_t(row) * a.ldy[p] + c] += finish_term(t, table_u(a, row, p));
}

// grid (rows, ceil(out / 256)), 256 threads: gate and up with their terms
// into SwiGLU (LoraTableArgs::swiglu_out), every row, one column each; the
// SwiGLU kernel's formula.
__global__ void table_expand_swiglu_kernel(LoraTableArgs a) {
  const int32_t row = int32_t(blockIdx.x);
  const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  const int32_t slot = a.row_slot[row];
  const TermColumn gate = load_table_column(a, slot, 0, c), up = load_table_column(a, slot, 1, c);
  detail::pdl_prologue();
  if (c >= a.out[0]) return;
  float g = a.y[0][int64_t(row) * a.ldy[0] + c], v = a.y[1][int64_t(row) * a.ldy[1] + c];
  if (gate.bt != nullptr) g += finish_term(gate, table_u(a, row, 0));
  if (up.bt != nullptr) v += finish_term(up, table_u(a, row, 1));
  a.swiglu_out[int64_t(row) * a.ld_swiglu + c] = g / (1.0f + __expf(-g)) * v;
}

}  // namespace

// A block per (row, part, k) keeps every SM busy at a handful of rows, but
// each block reads the whole row of x (and norm_w) for one rank's dot
// product: at 16 rows of Q/K/V that is 768 blocks re-reading ~30 MB from L2.
// So a block takes G ranks, the largest power of two up to 16 (and up to
// rank_cap) that still leaves about one block per SM (132 on an H100 or
// H200); the sums' bits do not depend on G.
constexpr int64_t kShrinkBlocksWanted = 128;

void lora_table_shrink(const LoraTableArgs& a) {
  if (a.n_rows == 0 || a.n_parts == 0 || a.rank_cap == 0) return;
  const int64_t blocks_per_group = int64_t(a.n_rows) * a.n_parts;
  int g = 1;
  while (2 * g <= std::min(16, a.rank_cap) &&
         blocks_per_group * ((a.rank_cap + 2 * g - 1) / (2 * g)) >= kShrinkBlocksWanted)
    g *= 2;
  const int32_t groups = (a.rank_cap + g - 1) / g;
  const dim3 grid(unsigned(a.n_rows), unsigned(a.n_parts * groups)), block(kShrinkThreads);
  switch (g) {
    case 1: return detail::launch_dependent(table_shrink_kernel<1>, grid, block, 0, a, groups);
    case 2: return detail::launch_dependent(table_shrink_kernel<2>, grid, block, 0, a, groups);
    case 4: return detail::launch_dependent(table_shrink_kernel<4>, grid, block, 0, a, groups);
    case 8: return detail::launch_dependent(table_shrink_kernel<8>, grid, block, 0, a, groups);
    default: return detail::launch_dependent(table_shrink_kernel<16>, grid, block, 0, a, groups);
  }
}

void lora_table_expand(const LoraTableArgs& a) {
  if (a.n_rows == 0 || a.n_parts == 0 || a.rank_cap == 0) return;
  if (a.swiglu_out != nullptr)
    return detail::launch_dependent(table_expand_swiglu_kernel,
                                    dim3(unsigned(a.n_rows), unsigned((a.out[0] + 255) / 256)), dim3(256), 0, a);
  int64_t max_out = 0;
  for (int p = 0; p < a.n_parts; ++p) max_out = std::max(max_out, a.out[p]);
  const int32_t column_blocks = int32_t((max_out + 255) / 256);
  detail::launch_dependent(table_expand_kernel, dim3(unsigned(a.n_rows), unsigned(a.n_parts * column_blocks)),
                           dim3(256), 0, a, column_blocks);
}

}  // namespace brioche::cuda
