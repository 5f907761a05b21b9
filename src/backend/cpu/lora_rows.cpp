#include "backend/cpu/lora_rows.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/vec_f32.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

namespace {

// Rows of one segment handled together: each factor row is read once per
// block, not once per row (a segment's rows share its adapter).
constexpr int32_t kRowBlock = 8;
// Output columns per expand task: a factor row's slice stays in L1 while
// every row of the block takes it.
constexpr int64_t kColumnChunk = 256;
// Below this many multiply-adds a call runs on the calling thread: a
// decode step of one row makes 7 calls per layer, each a few microseconds
// of work, which a dispatch to the pool would cost again.
constexpr int64_t kSerialWork = 1 << 18;

struct RowBlock {
  int32_t segment, first_row, n_rows;
};

// Up to kRowGroup rows go through each loaded factor vector together: a
// factor load (and its f16 conversion) then feeds R multiply-adds, not one.
constexpr int kRowGroup = 4;

// u[i][k] = A[k]·x[i] for R rows: R dot products over `in` per factor row.
template <int R>
void shrink_rows(const float* const* x, float* const* u, const uint16_t* a, int64_t in, int32_t rank) {
  for (int32_t k = 0; k < rank; ++k) {
    const uint16_t* ak = a + int64_t(k) * in;
    float sum[R] = {};
    int64_t c = 0;
#if BRIOCHE_VEC_AVX2
    __m256 acc[R];
    for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
    for (; c + 8 <= in; c += 8) {
      const __m256 w = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ak + c)));
      for (int i = 0; i < R; ++i) acc[i] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x[i] + c), acc[i]);
    }
    for (int i = 0; i < R; ++i) sum[i] = hsum256(acc[i]);
#endif
    for (; c < in; ++c)
      for (int i = 0; i < R; ++i) sum[i] += f16_to_f32(ak[c]) * x[i][c];
    for (int i = 0; i < R; ++i) u[i][k] = sum[i];
  }
}

// y[i][c] += Σ_k u[i][k]·bt[k·ld + c] for R rows and c < width: each y
// vector loaded and stored once, the rank's products summed in registers.
template <int R>
void expand_rows(float* const* y, const float* const* u, const uint16_t* bt, int64_t ld, int32_t rank, int64_t width) {
  int64_t c = 0;
#if BRIOCHE_VEC_AVX2
  for (; c + 8 <= width; c += 8) {
    __m256 acc[R];
    for (int i = 0; i < R; ++i) acc[i] = _mm256_loadu_ps(y[i] + c);
    for (int32_t k = 0; k < rank; ++k) {
      const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bt + int64_t(k) * ld + c)));
      for (int i = 0; i < R; ++i) acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(u[i] + k), b, acc[i]);
    }
    for (int i = 0; i < R; ++i) _mm256_storeu_ps(y[i] + c, acc[i]);
  }
#endif
  for (; c < width; ++c) {
    for (int i = 0; i < R; ++i) {
      float sum = y[i][c];
      for (int32_t k = 0; k < rank; ++k) sum += u[i][k] * f16_to_f32(bt[int64_t(k) * ld + c]);
      y[i][c] = sum;
    }
  }
}

// fn.template operator()<R>(i) for the row groups [i, i + R) that cover [0, n).
template <typename Fn>
void for_row_groups(int32_t n, Fn&& fn) {
  for (int32_t i = 0; i < n; i += kRowGroup) {
    switch (std::min(kRowGroup, n - i)) {
      case 4: fn.template operator()<4>(i); break;
      case 3: fn.template operator()<3>(i); break;
      case 2: fn.template operator()<2>(i); break;
      default: fn.template operator()<1>(i); break;
    }
  }
}

}  // namespace

void lora_rows_add(const LoraRowsArgs& a) {
  std::vector<RowBlock> blocks;
  for (int32_t s = 0; s < a.n_segments; ++s) {
    const LoraRowsSegment& seg = a.segments[s];
    for (int32_t r = 0; r < seg.n_rows; r += kRowBlock)
      blocks.push_back({s, seg.first_row + r, std::min(kRowBlock, seg.n_rows - r)});
  }
  // Shrink: u[row, k] = A[k]·x[row].
  auto shrink = [&](int t) {
    const RowBlock& b = blocks[size_t(t)];
    const LoraRowsSegment& seg = a.segments[b.segment];
    for_row_groups(b.n_rows, [&]<int R>(int32_t i) {
      const float* x[R];
      float* u[R];
      for (int j = 0; j < R; ++j) {
        const int64_t row = b.first_row + i + j;
        x[j] = a.x + row * a.ldx;
        u[j] = a.u + row * a.ldu;
      }
      shrink_rows<R>(x, u, seg.a, a.in, seg.rank);
    });
  };
  // Expand: y[row, c] += Σ_k u[row, k]·bt[k, c], by column chunks.
  const int64_t n_chunks = (a.out + kColumnChunk - 1) / kColumnChunk;
  auto expand = [&](int t) {
    const RowBlock& b = blocks[size_t(t / n_chunks)];
    const LoraRowsSegment& seg = a.segments[b.segment];
    const int64_t c0 = (t % n_chunks) * kColumnChunk, width = std::min(kColumnChunk, a.out - c0);
    for_row_groups(b.n_rows, [&]<int R>(int32_t i) {
      float* y[R];
      const float* u[R];
      for (int j = 0; j < R; ++j) {
        const int64_t row = b.first_row + i + j;
        y[j] = a.y + row * a.ldy + c0;
        u[j] = a.u + row * a.ldu;
      }
      expand_rows<R>(y, u, seg.bt + c0, a.out, seg.rank, width);
    });
  };
  const int n_expand = int(int64_t(blocks.size()) * n_chunks);
  int64_t work = 0;
  for (const RowBlock& b : blocks) work += int64_t(b.n_rows) * a.segments[b.segment].rank * (a.in + a.out);
  if (work < kSerialWork) {
    for (int t = 0; t < int(blocks.size()); ++t) shrink(t);
    for (int t = 0; t < n_expand; ++t) expand(t);
    return;
  }
  ThreadPool& pool = ThreadPool::global();
  pool.run(int(blocks.size()), shrink);
  pool.run(n_expand, expand);
}

// The reference of the CUDA kernels' table path (the model's CPU forward
// takes lora_rows_add): plain loops, the same math, not the kernels'
// summation order.
void lora_table_shrink(const LoraTableArgs& a) {
  for (int32_t r = 0; r < a.n_rows; ++r) {
    const int32_t slot = a.row_slot[r];
    if (slot < 0) continue;
    const float* x = a.x + int64_t(r) * a.ldx;
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

void lora_table_expand(const LoraTableArgs& a) {
  for (int32_t r = 0; r < a.n_rows; ++r) {
    const int32_t slot = a.row_slot[r];
    if (slot < 0) continue;
    for (int32_t p = 0; p < a.n_parts; ++p) {
      const LoraFactors& f = a.factors[int64_t(slot) * a.slot_stride + a.entry[p]];
      if (f.a == nullptr) continue;
      const float* u = a.u + int64_t(r) * a.ldu + int64_t(p) * a.rank_cap;
      float* y = a.y[p] + int64_t(r) * a.ldy[p];
      for (int64_t c = 0; c < a.out[p]; ++c) {
        float sum = 0.0f;
        for (int32_t k = 0; k < f.rank; ++k) sum += u[k] * f16_to_f32(f.bt[int64_t(k) * a.out[p] + c]);
        y[c] += sum;
      }
    }
  }
}

}  // namespace brioche::backend::cpu
