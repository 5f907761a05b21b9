#include "backend/cpu/linear_backward.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "ops/quantize.h"

namespace brioche::backend::cpu {

namespace {

// out[0..k) += a · row[0..k)
inline void axpy(float a, const float* __restrict row, float* __restrict out, int64_t k) {
  for (int64_t i = 0; i < k; ++i) out[i] += a * row[i];
}

// Rows of w tile [m0, m1) as f32, [m1 - m0, k] contiguous.
void dequantize_tile(const MatmulInputGradArgs& a, int64_t m0, int64_t m1, float* tile) {
  ThreadPool::global().parallel_for(m1 - m0, 16, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const void* row = static_cast<const char*>(a.w) + size_t(m0 + j) * a.w_row_bytes;
      ops::dequantize_row(a.wtype, row, tile + j * a.k, a.k);
    }
  });
}

}  // namespace

// dx[n, :] = Σ_j dy[n, j] · w[j, :], walking w in row tiles so a quantized
// weight is decoded one tile at a time (f32 weights are read in place).
void matmul_input_grad(const MatmulInputGradArgs& a) {
  if (!a.accumulate) {
    for (int64_t r = 0; r < a.n; ++r) std::memset(a.dx + r * a.ld_dx, 0, size_t(a.k) * 4);
  }
  const bool direct = a.wtype == DType::F32;
  const int64_t tile_rows = std::max<int64_t>(16, std::min<int64_t>(a.m, (1 << 18) / std::max<int64_t>(a.k, 1)));
  std::vector<float> tile(direct ? 0 : size_t(tile_rows * a.k));  // [tile_rows, k]
  for (int64_t m0 = 0; m0 < a.m; m0 += tile_rows) {
    const int64_t m1 = std::min(a.m, m0 + tile_rows);
    const float* w_tile;
    int64_t ld_w;
    if (direct) {
      w_tile = reinterpret_cast<const float*>(static_cast<const char*>(a.w) + size_t(m0) * a.w_row_bytes);
      ld_w = int64_t(a.w_row_bytes / 4);
    } else {
      dequantize_tile(a, m0, m1, tile.data());
      w_tile = tile.data();
      ld_w = a.k;
    }
    const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, (m1 - m0) * a.k));
    ThreadPool::global().parallel_for(a.n, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const float* g = a.dy + r * a.ld_dy;
        float* out = a.dx + r * a.ld_dx;
        for (int64_t j = m0; j < m1; ++j) {
          const float gj = g[j];
          if (gj != 0.0f) axpy(gj, w_tile + (j - m0) * ld_w, out, a.k);
        }
      }
    });
  }
}

// dw[j, :] += Σ_n dy[n, j] · x[n, :], one output row per task.
void matmul_weight_grad(const MatmulWeightGradArgs& a) {
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, a.n * a.k));
  ThreadPool::global().parallel_for(a.m, grain, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      float* out = a.dw + j * a.ld_dw;
      for (int64_t r = 0; r < a.n; ++r) {
        const float g = a.dy[r * a.ld_dy + j];
        if (g != 0.0f) axpy(g, a.x + r * a.ld_x, out, a.k);
      }
    }
  });
}

}  // namespace brioche::backend::cpu
