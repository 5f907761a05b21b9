#include "backend/cpu/lora_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/lora_rows_kernels.h"
#include "backend/cpu/vec_f32.h"
#include "core/half.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

namespace {

// Rows of one segment handled together: each factor row is read once per
// block, not once per row (a segment's rows share its adapter).
constexpr int32_t kRowBlock = 8;
// Output columns per expand task: a factor row's slice stays in L1 while
// every row of the block takes it. Whole Q8_0 blocks.
constexpr int64_t kColumnChunk = 256;
static_assert(kColumnChunk % kQ8Block == 0);
// Below this many multiply-adds a call runs on the calling thread: a
// decode step of one row makes 7 calls per layer, each a few microseconds
// of work, which a dispatch to the pool would cost again.
constexpr int64_t kSerialWork = 1 << 18;

struct RowBlock {
  int32_t segment, first_row, n_rows;
};

// u[i][k0 + j] = A[k0 + j]·x[i] for R rows and K factor rows: each x
// vector loaded once for K factor rows, each converted factor vector used
// by R rows, and R·K independent accumulators (one FMA chain each would
// wait on the FMA latency). Each u sums its products in the same order
// whatever R and K. The loops over i, j and v are unrolled by pragma: at
// -O2 GCC leaves them rolled and keeps the accumulators on the stack (1.6x
// slower at the default model's shapes, bench/lora_rows_bench.cpp).
template <int R, int K>
void shrink_rows_k(const float* const* x, float* const* u, const uint16_t* a, int64_t in, int32_t k0) {
  float sum[R][K] = {};
  int64_t c = 0;
#if BRIOCHE_VEC_AVX2
  __m256 acc[R][K];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) acc[i][j] = _mm256_setzero_ps();
#pragma GCC unroll 16
  for (int j = 0; j < K; ++j) prefetch_factor_row_start(a + int64_t(k0 + j) * in, 2 * in);
  for (; c + 8 <= in; c += 8) {
    if (c % 32 == 0) {  // one prefetch per cache line of each factor row
#pragma GCC unroll 16
      for (int j = 0; j < K; ++j) prefetch_factor_line(a + int64_t(k0 + j) * in + c + kLoraPrefetchAhead);
    }
    __m256 xv[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) xv[i] = _mm256_loadu_ps(x[i] + c);
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) {
      const __m256 w = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + int64_t(k0 + j) * in + c)));
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) acc[i][j] = _mm256_fmadd_ps(w, xv[i], acc[i][j]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) sum[i][j] = hsum256(acc[i][j]);
#endif
  for (; c < in; ++c)
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j)
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) sum[i][j] += f16_to_f32(a[int64_t(k0 + j) * in + c]) * x[i][c];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) u[i][k0 + j] = sum[i][j];
}

// u[i][k] = A[k]·x[i] for R rows: R dot products over `in` per factor row,
// factor rows taken as many at a time as the 16 vector registers allow.
template <int R>
void shrink_rows(const float* const* x, float* const* u, const uint16_t* a, int64_t in, int32_t rank) {
  constexpr int K = R <= 1 ? 8 : R == 2 ? 4 : R == 3 ? 3 : 2;
  int32_t k = 0;
  for (; k + K <= rank; k += K) shrink_rows_k<R, K>(x, u, a, in, k);
  for (; k < rank; ++k) shrink_rows_k<R, 1>(x, u, a, in, k);
}

// y[i][c] += Σ_k u[i][k]·bt[k·ld + c] for R rows and c < width: each y
// vector loaded and stored once, the rank's products summed in registers
// in k order, V column vectors at a time so R·V FMA chains run together.
template <int R>
void expand_rows(float* const* y, const float* const* u, const uint16_t* bt, int64_t ld, int32_t rank, int64_t width) {
  int64_t c = 0;
#if BRIOCHE_VEC_AVX2
  for (int32_t k = 0; k < rank; ++k) prefetch_factor_row_start(bt + int64_t(k) * ld, 2 * width);
  auto columns = [&]<int V>() {
    for (; c + 8 * V <= width; c += 8 * V) {
      if (c % 32 == 0) {  // one prefetch per cache line of each factor row
        for (int32_t k = 0; k < rank; ++k) prefetch_factor_line(bt + int64_t(k) * ld + c + kLoraPrefetchAhead);
      }
      __m256 acc[R][V];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
        for (int v = 0; v < V; ++v) acc[i][v] = _mm256_loadu_ps(y[i] + c + 8 * v);
      for (int32_t k = 0; k < rank; ++k) {
        __m256 b[V];
#pragma GCC unroll 16
        for (int v = 0; v < V; ++v)
          b[v] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bt + int64_t(k) * ld + c + 8 * v)));
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
          const __m256 uk = _mm256_broadcast_ss(u[i] + k);
#pragma GCC unroll 16
          for (int v = 0; v < V; ++v) acc[i][v] = _mm256_fmadd_ps(uk, b[v], acc[i][v]);
        }
      }
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
        for (int v = 0; v < V; ++v) _mm256_storeu_ps(y[i] + c + 8 * v, acc[i][v]);
    }
  };
  columns.template operator()<R <= 2 ? 4 : 2>();
  columns.template operator()<1>();
#endif
  for (; c < width; ++c) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      float sum = y[i][c];
      for (int32_t k = 0; k < rank; ++k) sum += u[i][k] * f16_to_f32(bt[int64_t(k) * ld + c]);
      y[i][c] = sum;
    }
  }
}

// Q8_0 block b of a factor row: its scale d and its 32 int8 values.
inline float q8_scale(const uint8_t* block) {
  uint16_t d;
  std::memcpy(&d, block, 2);
  return f16_to_f32(d);
}
inline const int8_t* q8_values(const uint8_t* block) { return reinterpret_cast<const int8_t*>(block + 2); }

// shrink_rows_k on Q8_0 factors by block column (in a multiple of 32):
// per step the K factor rows' block b, adjacent in memory, each 8-value
// group decoded (d·q) once for the R rows.
template <int R, int K>
void shrink_q8_rows_k(const float* const* x, float* const* u, const uint8_t* a, int64_t in, int32_t rank, int32_t k0) {
  const int64_t column_bytes = int64_t(rank) * kQ8BlockBytes;
  float sum[R][K] = {};
#if BRIOCHE_VEC_AVX2
  __m256 acc[R][K];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) acc[i][j] = _mm256_setzero_ps();
  prefetch_stream_start(a + int64_t(k0) * kQ8BlockBytes, in / kQ8Block * column_bytes, kLoraQ8PrefetchBytes);
  for (int64_t c = 0; c < in; c += kQ8Block) {
    const uint8_t* blocks = a + c / kQ8Block * column_bytes + int64_t(k0) * kQ8BlockBytes;
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) {
      const uint8_t* block = blocks + j * kQ8BlockBytes;
      prefetch_factor_line(block + kLoraQ8PrefetchBytes);
      const __m256 d = _mm256_set1_ps(q8_scale(block));
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q8_values(block) + 8 * v));
        const __m256 w = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) acc[i][j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x[i] + c + 8 * v), acc[i][j]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) sum[i][j] = hsum256(acc[i][j]);
#else
  for (int64_t c = 0; c < in; c += kQ8Block)
    for (int j = 0; j < K; ++j) {
      const uint8_t* block = a + c / kQ8Block * column_bytes + int64_t(k0 + j) * kQ8BlockBytes;
      const float d = q8_scale(block);
      for (int t = 0; t < kQ8Block; ++t)
        for (int i = 0; i < R; ++i) sum[i][j] += d * float(q8_values(block)[t]) * x[i][c + t];
    }
#endif
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) u[i][k0 + j] = sum[i][j];
}

template <int R>
void shrink_q8_rows(const float* const* x, float* const* u, const uint8_t* a, int64_t in, int32_t rank) {
  constexpr int K = R <= 1 ? 8 : R == 2 ? 4 : R == 3 ? 3 : 2;
  int32_t k = 0;
  for (; k + K <= rank; k += K) shrink_q8_rows_k<R, K>(x, u, a, in, rank, k);
  for (; k < rank; ++k) shrink_q8_rows_k<R, 1>(x, u, a, in, rank, k);
}

// expand_rows on Q8_0 factors by block column (width a multiple of 32): V
// column vectors of 8 per pass, inside one block column (a whole one for
// R ≤ 2, half of one above).
template <int R>
void expand_q8_rows(float* const* y, const float* const* u, const uint8_t* bt, int32_t rank, int64_t width) {
  const int64_t column_bytes = int64_t(rank) * kQ8BlockBytes;
#if BRIOCHE_VEC_AVX2
  constexpr int V = R <= 2 ? 4 : 2;
  prefetch_stream_start(bt, width / kQ8Block * column_bytes, kLoraQ8PrefetchBytes);
  for (int64_t c = 0; c < width; c += 8 * V) {
    const uint8_t* column = bt + c / kQ8Block * column_bytes;
    const int64_t in_block = c % kQ8Block;
    __m256 acc[R][V];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) acc[i][v] = _mm256_loadu_ps(y[i] + c + 8 * v);
    for (int32_t k = 0; k < rank; ++k) {
      const uint8_t* block = column + int64_t(k) * kQ8BlockBytes;
      if (in_block == 0) prefetch_factor_line(block + kLoraQ8PrefetchBytes);
      const __m256 d = _mm256_set1_ps(q8_scale(block));
      __m256 w[V];
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) {
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q8_values(block) + in_block + 8 * v));
        w[v] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
      }
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const __m256 uk = _mm256_broadcast_ss(u[i] + k);
#pragma GCC unroll 16
        for (int v = 0; v < V; ++v) acc[i][v] = _mm256_fmadd_ps(uk, w[v], acc[i][v]);
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) _mm256_storeu_ps(y[i] + c + 8 * v, acc[i][v]);
  }
#else
  for (int64_t c = 0; c < width; ++c) {
    for (int i = 0; i < R; ++i) {
      float sum = y[i][c];
      for (int32_t k = 0; k < rank; ++k) {
        const uint8_t* block = bt + c / kQ8Block * column_bytes + int64_t(k) * kQ8BlockBytes;
        sum += u[i][k] * (q8_scale(block) * float(q8_values(block)[c % kQ8Block]));
      }
      y[i][c] = sum;
    }
  }
#endif
}

}  // namespace

const LoraRowKernels& lora_row_kernels_avx2() {
  static const LoraRowKernels kernels{
      .shrink = {&shrink_rows<1>, &shrink_rows<2>, &shrink_rows<3>, &shrink_rows<4>},
      .expand = {&expand_rows<1>, &expand_rows<2>, &expand_rows<3>, &expand_rows<4>},
      .shrink_q8 = {&shrink_q8_rows<1>, &shrink_q8_rows<2>, &shrink_q8_rows<3>, &shrink_q8_rows<4>},
      .expand_q8 = {&expand_q8_rows<1>, &expand_q8_rows<2>, &expand_q8_rows<3>, &expand_q8_rows<4>},
  };
  return kernels;
}

namespace {

// The widest kernels this CPU runs (the override of tests and benchmarks
// included).
const LoraRowKernels& row_kernels() {
  switch (brioche::cpu::active_isa()) {
    case brioche::cpu::Isa::Avx512:
    case brioche::cpu::Isa::Avx512Vnni: return lora_row_kernels_avx512();
    default: return lora_row_kernels_avx2();
  }
}

// fn(i, R) for the row groups [i, i + R) that cover [0, n).
template <typename Fn>
void for_row_groups(int32_t n, Fn&& fn) {
  for (int32_t i = 0; i < n; i += kLoraRowGroup) fn(i, std::min(kLoraRowGroup, n - i));
}

}  // namespace

namespace {

// One task of a call: a row block of one projection (part), or, where the
// blocks are too few to keep the threads busy, a block's shrink and its
// expand by column chunks in two dispatches.
struct PartBlock {
  int32_t part;
  RowBlock block;
};

std::vector<PartBlock> row_blocks(std::span<const LoraRowsArgs> parts) {
  std::vector<PartBlock> blocks;
  for (size_t p = 0; p < parts.size(); ++p) {
    for (int32_t s = 0; s < parts[p].n_segments; ++s) {
      const LoraRowsSegment& seg = parts[p].segments[s];
      for (int32_t r = 0; r < seg.n_rows; r += kRowBlock)
        blocks.push_back({int32_t(p), {s, seg.first_row + r, std::min(kRowBlock, seg.n_rows - r)}});
    }
  }
  return blocks;
}

// u[i][k] = A[k]·x[row i] for the block's rows (u rows of stride ldu).
void shrink_block(const LoraRowsArgs& a, const RowBlock& b, float* u, int64_t ldu) {
  const LoraRowsSegment& seg = a.segments[b.segment];
  const LoraRowKernels& kernels = row_kernels();
  for_row_groups(b.n_rows, [&](int32_t i, int rows) {
    const float* x[kLoraRowGroup];
    float* ur[kLoraRowGroup];
    for (int j = 0; j < rows; ++j) {
      x[j] = a.x + int64_t(b.first_row + i + j) * a.ldx;
      ur[j] = u + int64_t(i + j) * ldu;
    }
    if (seg.a_q8 != nullptr) {
      kernels.shrink_q8[rows - 1](x, ur, seg.a_q8, a.in, seg.rank);
    } else {
      kernels.shrink[rows - 1](x, ur, seg.a, a.in, seg.rank);
    }
  });
}

// y[row i, c0 + c] += Σ_k u[i][k]·bt[k, c0 + c] for c < width.
void expand_block(const LoraRowsArgs& a, const RowBlock& b, const float* u, int64_t ldu, int64_t c0, int64_t width) {
  const LoraRowsSegment& seg = a.segments[b.segment];
  const LoraRowKernels& kernels = row_kernels();
  for_row_groups(b.n_rows, [&](int32_t i, int rows) {
    float* y[kLoraRowGroup];
    const float* ur[kLoraRowGroup];
    for (int j = 0; j < rows; ++j) {
      y[j] = a.y + int64_t(b.first_row + i + j) * a.ldy + c0;
      ur[j] = u + int64_t(i + j) * ldu;
    }
    if (seg.bt_q8 != nullptr) {
      // (c0 and width are whole block columns: chunks are multiples of 32)
      kernels.expand_q8[rows - 1](y, ur, seg.bt_q8 + c0 / kQ8Block * seg.rank * kQ8BlockBytes, seg.rank, width);
    } else {
      kernels.expand[rows - 1](y, ur, seg.bt + c0, a.out, seg.rank, width);
    }
  });
}

// A block's whole update in one task: the shrink into a local u (the
// block's rows of a.u too, where the call has one), then the expand over
// every column. No other task reads it, so shrink and expand need no
// barrier between them and the parts' tasks share one dispatch.
void block_update(const LoraRowsArgs& a, const RowBlock& b) {
  float u[kRowBlock * kMaxLoraRowsRank];
  const int32_t rank = a.segments[b.segment].rank;
  shrink_block(a, b, u, rank);
  expand_block(a, b, u, rank, 0, a.out);
  if (a.u != nullptr)
    for (int32_t i = 0; i < b.n_rows; ++i)
      std::copy_n(u + int64_t(i) * rank, rank, a.u + int64_t(b.first_row + i) * a.ldu);
}

int64_t block_work(std::span<const LoraRowsArgs> parts, const PartBlock& pb) {
  const LoraRowsArgs& a = parts[size_t(pb.part)];
  return int64_t(pb.block.n_rows) * a.segments[pb.block.segment].rank * (a.in + a.out);
}

}  // namespace

void lora_rows_add(const LoraRowsArgs& a) {
  const std::vector<PartBlock> blocks = row_blocks(std::span(&a, 1));
  int64_t work = 0;
  for (const PartBlock& pb : blocks) work += block_work(std::span(&a, 1), pb);
  ThreadPool& pool = ThreadPool::global();
  if (work < kSerialWork || int(blocks.size()) >= 2 * pool.size() || a.u == nullptr) {
    // Enough blocks for every thread (a decode batch of several adapters,
    // a prefill), or no u to pass between two dispatches: one task per
    // block, one dispatch.
    return pool.run(work < kSerialWork ? 1 : int(blocks.size()), [&](int t) {
      if (work < kSerialWork) {
        for (const PartBlock& pb : blocks) block_update(a, pb.block);
      } else {
        block_update(a, blocks[size_t(t)].block);
      }
    });
  }
  // Few blocks of much work (one adapter's rows, wide projections): the
  // shrink by block, then the expand by block and column chunk.
  pool.run(int(blocks.size()), [&](int t) {
    const RowBlock& b = blocks[size_t(t)].block;
    shrink_block(a, b, a.u + int64_t(b.first_row) * a.ldu, a.ldu);
  });
  const int64_t n_chunks = (a.out + kColumnChunk - 1) / kColumnChunk;
  pool.run(int(int64_t(blocks.size()) * n_chunks), [&](int t) {
    const RowBlock& b = blocks[size_t(t / n_chunks)].block;
    const int64_t c0 = (t % n_chunks) * kColumnChunk;
    expand_block(a, b, a.u + int64_t(b.first_row) * a.ldu, a.ldu, c0, std::min(kColumnChunk, a.out - c0));
  });
}

void lora_rows_add_group(std::span<const LoraRowsArgs> parts) {
  if (parts.size() == 1 && parts[0].u != nullptr) return lora_rows_add(parts[0]);
  // One task per row block, taking that block in every part: a block's
  // rows share one adapter, whose factors the server allocated one after
  // another (A, s·Bᵀ, projection by projection), so a task reads one
  // near-sequential stream instead of a few KB in each of 2·parts places
  // between other tasks' reads.
  std::vector<PartBlock> blocks = row_blocks(parts);
  std::stable_sort(blocks.begin(), blocks.end(),
                   [](const PartBlock& l, const PartBlock& r) { return l.block.first_row < r.block.first_row; });
  std::vector<size_t> task_begin;  // [tasks + 1]: blocks [task_begin[t], task_begin[t + 1]) share their rows
  for (size_t i = 0; i < blocks.size(); ++i)
    if (i == 0 || blocks[i].block.first_row != blocks[i - 1].block.first_row) task_begin.push_back(i);
  task_begin.push_back(blocks.size());
  int64_t work = 0;
  for (const PartBlock& pb : blocks) work += block_work(parts, pb);
  const int n_tasks = int(task_begin.size()) - 1;
  ThreadPool::global().run(work < kSerialWork ? 1 : n_tasks, [&](int t) {
    const size_t begin = work < kSerialWork ? 0 : task_begin[size_t(t)];
    const size_t end = work < kSerialWork ? blocks.size() : task_begin[size_t(t) + 1];
    for (size_t i = begin; i < end; ++i) block_update(parts[size_t(blocks[i].part)], blocks[i].block);
  });
}

// The reference of the CUDA kernels' table path (the model's CPU forward
// takes lora_rows_add): plain loops, the same math, not the kernels'
// summation order.
void lora_table_shrink(const LoraTableArgs& a) {
  std::vector<float> normed;
  for (int32_t r = 0; r < a.n_rows; ++r) {
    const int32_t slot = a.row_slot[r];
    if (slot < 0) continue;
    const float* x = a.x + int64_t(r) * a.ldx;
    if (a.norm_w != nullptr) {
      float sum_sq = 0.0f;
      for (int64_t c = 0; c < a.in; ++c) sum_sq += x[c] * x[c];
      const float rstd = 1.0f / std::sqrt(sum_sq / float(a.in) + a.norm_eps);
      normed.resize(size_t(a.in));
      for (int64_t c = 0; c < a.in; ++c) normed[size_t(c)] = x[c] * rstd * a.norm_w[c];
      x = normed.data();
    }
    for (int32_t p = 0; p < a.n_parts; ++p) {
      const LoraFactors& f = a.factors[int64_t(slot) * a.slot_stride + a.entry[p]];
      float* u = a.u + int64_t(r) * a.ldu + int64_t(p) * a.rank_cap;
      for (int32_t k = 0; k < f.rank && f.a != nullptr; ++k) {
        const uint16_t* ak = f.a + int64_t(k) * a.in;
        float sum = 0.0f;
        for (int64_t c = 0; c < a.in; ++c) sum += f16_to_f32(ak[c]) * x[c];
        u[k] = sum;
      }
    }
  }
}

namespace {

// Σ_k u[r, p·rank_cap + k]·bt_f[k, c]: part p's low-rank term of row r at
// column c (0 for a row without a slot or a slot that leaves p alone).
float table_term(const LoraTableArgs& a, int32_t r, int32_t p, int64_t c) {
  const int32_t slot = a.row_slot[r];
  if (slot < 0) return 0.0f;
  const LoraFactors& f = a.factors[int64_t(slot) * a.slot_stride + a.entry[p]];
  if (f.a == nullptr) return 0.0f;
  const float* u = a.u + int64_t(r) * a.ldu + int64_t(p) * a.rank_cap;
  float sum = 0.0f;
  for (int32_t k = 0; k < f.rank; ++k) sum += u[k] * f16_to_f32(f.bt[int64_t(k) * a.out[p] + c]);
  return sum;
}

}  // namespace

void lora_table_expand(const LoraTableArgs& a) {
  for (int32_t r = 0; r < a.n_rows; ++r) {
    if (a.swiglu_out != nullptr) {
      const float* gate = a.y[0] + int64_t(r) * a.ldy[0];
      const float* up = a.y[1] + int64_t(r) * a.ldy[1];
      float* out = a.swiglu_out + int64_t(r) * a.ld_swiglu;
      for (int64_t c = 0; c < a.out[0]; ++c) {
        const float g = gate[c] + table_term(a, r, 0, c), v = up[c] + table_term(a, r, 1, c);
        out[c] = g / (1.0f + std::exp(-g)) * v;
      }
      continue;
    }
    if (a.row_slot[r] < 0) continue;  // (y kept bit for bit)
    for (int32_t p = 0; p < a.n_parts; ++p) {
      float* y = a.y[p] + int64_t(r) * a.ldy[p];
      for (int64_t c = 0; c < a.out[p]; ++c) y[c] += table_term(a, r, p, c);
    }
  }
}

}  // namespace brioche::backend::cpu
