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

// y[c] += Σ_k u[k]·bt[k·ld + c] for c < width: each y vector loaded and
// stored once, the rank's products accumulated in a register.
void expand_row(float* y, const float* u, const uint16_t* bt, int64_t ld, int32_t rank, int64_t width) {
  int64_t c = 0;
#if BRIOCHE_VEC_AVX2
  for (; c + 8 <= width; c += 8) {
    __m256 acc = _mm256_loadu_ps(y + c);
    for (int32_t k = 0; k < rank; ++k) {
      const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bt + int64_t(k) * ld + c)));
      acc = _mm256_fmadd_ps(_mm256_set1_ps(u[k]), b, acc);
    }
    _mm256_storeu_ps(y + c, acc);
  }
#endif
  for (; c < width; ++c) {
    float sum = y[c];
    for (int32_t k = 0; k < rank; ++k) sum += u[k] * f16_to_f32(bt[int64_t(k) * ld + c]);
    y[c] = sum;
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
    for (int32_t k = 0; k < seg.rank; ++k) {
      const uint16_t* ak = seg.a + int64_t(k) * a.in;
      for (int32_t i = 0; i < b.n_rows; ++i) {
        const int64_t row = b.first_row + i;
        a.u[row * a.ldu + k] = dot_f32_f16(a.x + row * a.ldx, ak, a.in);
      }
    }
  };
  // Expand: y[row, c] += Σ_k u[row, k]·bt[k, c], by column chunks.
  const int64_t n_chunks = (a.out + kColumnChunk - 1) / kColumnChunk;
  auto expand = [&](int t) {
    const RowBlock& b = blocks[size_t(t / n_chunks)];
    const LoraRowsSegment& seg = a.segments[b.segment];
    const int64_t c0 = (t % n_chunks) * kColumnChunk, width = std::min(kColumnChunk, a.out - c0);
    for (int32_t i = 0; i < b.n_rows; ++i) {
      const int64_t row = b.first_row + i;
      expand_row(a.y + row * a.ldy + c0, a.u + row * a.ldu, seg.bt + c0, a.out, seg.rank, width);
    }
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

}  // namespace brioche::backend::cpu
