#include "backend/cpu/train_rows.h"

#include <algorithm>

#include "core/dropout_hash.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

namespace {

int64_t grain_for(int64_t dim) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(dim, 1)); }

}  // namespace

void dropout(const DropoutArgs& a) {
  ThreadPool::global().parallel_for(a.n_rows, grain_for(a.dim), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* s = a.src + r * a.ld_src;
      float* o = a.dst + r * a.ld_dst;
      for (int64_t c = 0; c < a.dim; ++c) o[c] = s[c] * dropout_factor(a.key, a.p, a.first_row + r, c);
    }
  });
}

void add_scaled(const ScaledAddArgs& a) {
  ThreadPool::global().parallel_for(a.n_rows, grain_for(a.dim), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* x = a.x + r * a.ldx;
      float* y = a.y + r * a.ldy;
      for (int64_t c = 0; c < a.dim; ++c) y[c] += a.s * x[c];
    }
  });
}

void scale(const ScaleArgs& a) {
  ThreadPool::global().parallel_for(a.n_rows, grain_for(a.dim), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* x = a.x + r * a.ldx;
      for (int64_t c = 0; c < a.dim; ++c) x[c] *= a.s;
    }
  });
}

void fill(const ScaleArgs& a) {
  for (int64_t r = 0; r < a.n_rows; ++r) std::fill_n(a.x + r * a.ldx, a.dim, a.s);
}

void gather_rows(const RowIndexArgs& a) {
  ThreadPool::global().parallel_for(a.n, grain_for(a.dim), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) std::copy_n(a.src + a.rows[i] * a.ld_src, a.dim, a.dst + i * a.ld_dst);
  });
}

void scatter_add_rows(const RowIndexArgs& a) {
  // Serial over i keeps the order of repeated rows; the work is n·dim adds.
  for (int64_t i = 0; i < a.n; ++i) {
    const float* s = a.src + i * a.ld_src;
    float* d = a.dst + a.rows[i] * a.ld_dst;
    for (int64_t c = 0; c < a.dim; ++c) d[c] += s[c];
  }
}

}  // namespace brioche::backend::cpu
