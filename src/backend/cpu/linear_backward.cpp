#include "backend/cpu/linear_backward.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/amx_gemm.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/linear_backward_kernels.h"
#include "backend/cpu/panel_gemm.h"
#include "backend/cpu/quant_ref.h"
#include "core/thread_pool.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace brioche::backend::cpu {

namespace {

// out[0..k) += a · row[0..k)
inline void axpy(float a, const float* __restrict row, float* __restrict out, int64_t k) {
  for (int64_t i = 0; i < k; ++i) out[i] += a * row[i];
}

// Rows [m0, m1) of w ([m, k] rows of wtype) as f32, [m1 - m0, k] contiguous.
void dequantize_rows(DType wtype, const void* w, size_t w_row_bytes, int64_t k, int64_t m0, int64_t m1, float* tile) {
  ThreadPool::global().parallel_for(m1 - m0, 16, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const void* row = static_cast<const char*>(w) + size_t(m0 + j) * w_row_bytes;
      ::brioche::cpu::dequantize_row_ref(wtype, row, tile + j * k, k);  // (backend level: no call up into ops)
    }
  });
}

void dequantize_tile(const MatmulInputGradArgs& a, int64_t m0, int64_t m1, float* tile) {
  dequantize_rows(a.wtype, a.w, a.w_row_bytes, a.k, m0, m1, tile);
}

// One product through a quantized weight on AMX (amx_gemm.h) — the forward
// y = x·Wᵀ or the input gradient dx (+)= dy·W: W's bf16 tiles as given (made
// once a run, ops/amx_weight_tiles.h) or decoded straight into this
// thread's scratch tiles for this call.
void weight_product_on_amx(const float* a, int64_t lda, const AmxWeight& w, const uint16_t* tiles, float* out,
                           int64_t ldo, int64_t n, bool accumulate) {
  if (!tiles) {
    thread_local std::vector<uint16_t> per_call;
    per_call.resize(amx_weight_tiles_size(w));
    amx_pack_weight(w, per_call.data());
    tiles = per_call.data();
  }
  const bool forward = w.product == AmxWeightProduct::Forward;
  amx_gemm({.a = a,
            .lda = lda,
            .b = nullptr,
            .ldb = 0,
            .out = out,
            .ldo = ldo,
            .rows = n,
            .width = forward ? w.m : w.k,
            .T = forward ? w.k : w.m,
            .accumulate = accumulate,
            .split = false,
            .b_tiles = tiles});
}

// Register-blocked update of a [R rows, 16 columns] block of dx over the
// weight rows [m0, m1):  dx[r, c..c+16) += Σ_j dy[r, j] · w[j, c..c+16).
// 2R accumulators stay in registers; each weight vector is loaded once for R rows.
template <int R>
void block_update(const float* dy, int64_t ld_dy, const float* w, int64_t ld_w, int64_t m0, int64_t m1, float* dx,
                  int64_t ld_dx, int64_t c) {
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc[R][2];
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t j = m0; j < m1; ++j) {
    const float* wj = w + (j - m0) * ld_w + c;
    const __m256 w0 = _mm256_loadu_ps(wj), w1 = _mm256_loadu_ps(wj + 8);
    for (int i = 0; i < R; ++i) {
      const __m256 b = _mm256_broadcast_ss(dy + i * ld_dy + j);
      acc[i][0] = _mm256_fmadd_ps(b, w0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(b, w1, acc[i][1]);
    }
  }
  for (int i = 0; i < R; ++i) {
    float* out = dx + i * ld_dx + c;
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(out), acc[i][0]));
    _mm256_storeu_ps(out + 8, _mm256_add_ps(_mm256_loadu_ps(out + 8), acc[i][1]));
  }
#else
  float acc[R][16] = {};
  for (int64_t j = m0; j < m1; ++j) {
    const float* wj = w + (j - m0) * ld_w + c;
    for (int i = 0; i < R; ++i) {
      const float b = dy[i * ld_dy + j];
      for (int t = 0; t < 16; ++t) acc[i][t] += b * wj[t];
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < 16; ++t) dx[i * ld_dx + c + t] += acc[i][t];
#endif
}

// Rows [r0, r0 + rows) (rows ≤ 4), columns [c0, c1), weight rows [m0, m1).
// wide: AVX-512 blocks of 32 columns first (the same sums as AVX2's).
void update_rows(const MatmulInputGradArgs& a, const float* w_tile, int64_t ld_w, int64_t m0, int64_t m1, int64_t r0,
                 int rows, int64_t c0, int64_t c1, bool wide) {
  const float* dy = a.dy + r0 * a.ld_dy;
  float* dx = a.dx + r0 * a.ld_dx;
  int64_t c = c0;
  if (wide) {
    for (; c + 32 <= c1; c += 32)
      input_grad_block32_avx512({.dy = dy,
                                 .ld_dy = a.ld_dy,
                                 .w = w_tile,
                                 .ld_w = ld_w,
                                 .m0 = m0,
                                 .m1 = m1,
                                 .dx = dx,
                                 .ld_dx = a.ld_dx,
                                 .c = c,
                                 .rows = rows});
  }
  for (; c + 16 <= c1; c += 16) {
    switch (rows) {
      case 4: block_update<4>(dy, a.ld_dy, w_tile, ld_w, m0, m1, dx, a.ld_dx, c); break;
      case 3: block_update<3>(dy, a.ld_dy, w_tile, ld_w, m0, m1, dx, a.ld_dx, c); break;
      case 2: block_update<2>(dy, a.ld_dy, w_tile, ld_w, m0, m1, dx, a.ld_dx, c); break;
      default: block_update<1>(dy, a.ld_dy, w_tile, ld_w, m0, m1, dx, a.ld_dx, c); break;
    }
  }
  if (c < c1) {  // column tail: scalar
    for (int i = 0; i < rows; ++i)
      for (int64_t j = m0; j < m1; ++j) {
        const float g = dy[i * a.ld_dy + j];
        const float* wj = w_tile + (j - m0) * ld_w;
        for (int64_t t = c; t < c1; ++t) dx[i * a.ld_dx + t] += g * wj[t];
      }
  }
}

}  // namespace

// dx[n, :] = Σ_j dy[n, j] · w[j, :], walking w in row tiles so a quantized
// weight is decoded one tile at a time (f32 weights are read in place).
// Each tile is split into tasks of 4 dx rows × 128 columns.
void matmul_input_grad(const MatmulInputGradArgs& a) {
  if (amx_weight_products(a.wtype, a.n, a.m, a.k)) {
    weight_product_on_amx(a.dy, a.ld_dy,
                          {.wtype = a.wtype,
                           .w = a.w,
                           .w_row_bytes = a.w_row_bytes,
                           .m = a.m,
                           .k = a.k,
                           .product = AmxWeightProduct::InputGrad},
                          a.w_tiles, a.dx, a.ld_dx, a.n, a.accumulate);
    return;
  }
  if (!a.accumulate) {
    for (int64_t r = 0; r < a.n; ++r) std::memset(a.dx + r * a.ld_dx, 0, size_t(a.k) * 4);
  }
  const bool direct = a.wtype == DType::F32;
  const bool wide = ::brioche::cpu::active_isa() >= ::brioche::cpu::Isa::Avx512;
  const int64_t tile_rows = std::max<int64_t>(16, std::min<int64_t>(a.m, (1 << 18) / std::max<int64_t>(a.k, 1)));
  std::vector<float> tile(direct ? 0 : size_t(tile_rows * a.k));  // [tile_rows, k]
  constexpr int64_t kCols = 128;
  const int64_t row_blocks = (a.n + 3) / 4, col_blocks = (a.k + kCols - 1) / kCols;
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
    if (wide) {
      // AVX-512: panels of 6 rows × 64 columns (panel_gemm.h), tasks of 24 rows × 128 columns.
      constexpr int64_t kRows = 24;
      const int64_t tasks = ((a.n + kRows - 1) / kRows) * col_blocks;
      ThreadPool::global().parallel_for(tasks, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t r0 = (t / col_blocks) * kRows, c0 = (t % col_blocks) * kCols;
          panel_gemm_avx512({.a = a.dy + r0 * a.ld_dy + m0,
                             .sr = a.ld_dy,
                             .st = 1,
                             .b = w_tile + c0,
                             .ldb = ld_w,
                             .out = a.dx + r0 * a.ld_dx + c0,
                             .ldo = a.ld_dx,
                             .rows = std::min(kRows, a.n - r0),
                             .width = std::min(kCols, a.k - c0),
                             .T = m1 - m0,
                             .accumulate = true});
        }
      });
      continue;
    }
    const int64_t work = (m1 - m0) * 4 * kCols;  // FMAs per task
    ThreadPool::global().parallel_for(row_blocks * col_blocks, std::max<int64_t>(1, 262144 / work),
                                      [&](int64_t b, int64_t e) {
                                        for (int64_t t = b; t < e; ++t) {
                                          const int64_t rb = t / col_blocks, cb = t % col_blocks;
                                          const int64_t r0 = rb * 4;
                                          update_rows(a, w_tile, ld_w, m0, m1, r0, int(std::min<int64_t>(4, a.n - r0)),
                                                      cb * kCols, std::min(a.k, (cb + 1) * kCols), wide);
                                        }
                                      });
  }
}

// Only quantized weights (f32/f16/bf16 bases keep the f32 panels, which the
// golden and TRL/PEFT parity tests hold to f32 tolerances), and not LoRA's
// rank-r products (m or k = r: packing the wide operand cost more than
// their products).
bool amx_weight_products(DType wtype, int64_t n, int64_t m, int64_t k) {
  return n >= 8 && m >= 64 && k >= 64 && dtype_info(wtype).quantized && ::brioche::cpu::amx_bf16_active();
}

bool training_matmul_amx(const TrainingMatmulArgs& a) {
  if (!amx_weight_products(a.wtype, a.n, a.m, a.k)) return false;
  weight_product_on_amx(a.x, a.ldx,
                        {.wtype = a.wtype,
                         .w = a.w,
                         .w_row_bytes = a.w_row_bytes,
                         .m = a.m,
                         .k = a.k,
                         .product = AmxWeightProduct::Forward},
                        a.w_tiles, a.y, a.ldy, a.n, false);
  return true;
}

// dw[j, :] += Σ_n dy[n, j] · x[n, :].
// AVX-512: register-blocked outer products (weight_grad_block_avx512), the
// vectors along dw's longer side: for LoRA's dA ([r, in], r small) along the
// input features with the r rows of dy broadcast; for dB ([out, r]) along the
// output features with the r columns of x broadcast. Each task owns one
// [≤ 8, ≤ 48] block of dw and walks all n rows (they were one output row per
// task, one axpy per token: ~2 GFLOP/s for dB, whose k = r is 16 floats).
// Every element is one FMA chain over n in order from its old value, so
// accumulating over row chunks (the MLP's) equals one call bit for bit.
void matmul_weight_grad(const MatmulWeightGradArgs& a) {
  if (::brioche::cpu::active_isa() >= ::brioche::cpu::Isa::Avx512) {
    // Orientation: q (vectorised) runs along dw's columns (k) or its rows (m).
    const bool along_k = a.k >= a.m || a.k >= 48;
    const int64_t p_len = along_k ? a.m : a.k, q_len = along_k ? a.k : a.m;
    const int64_t p_blocks = (p_len + 7) / 8, q_blocks = (q_len + 47) / 48;
    ThreadPool::global().parallel_for(p_blocks * q_blocks, 1, [&](int64_t b, int64_t e) {
      float c[8 * 48];
      for (int64_t t = b; t < e; ++t) {
        const int64_t p0 = (t / q_blocks) * 8, q0 = (t % q_blocks) * 48;
        const int pc = int(std::min<int64_t>(8, p_len - p0)), qc = int(std::min<int64_t>(48, q_len - q0));
        // dw element of block (i, q)
        auto at = [&](int i, int q) -> float& {
          return along_k ? a.dw[(p0 + i) * a.ld_dw + q0 + q] : a.dw[(q0 + q) * a.ld_dw + p0 + i];
        };
        for (int i = 0; i < pc; ++i)
          for (int q = 0; q < 48; ++q) c[i * 48 + q] = q < qc ? at(i, q) : 0.0f;
        weight_grad_block_avx512({.p = along_k ? a.dy + p0 : a.x + p0,
                                  .ld_p = along_k ? a.ld_dy : a.ld_x,
                                  .v = along_k ? a.x + q0 : a.dy + q0,
                                  .ld_v = along_k ? a.ld_x : a.ld_dy,
                                  .n = a.n,
                                  .c = c,
                                  .p_count = pc,
                                  .q_count = qc});
        for (int i = 0; i < pc; ++i)
          for (int q = 0; q < qc; ++q) at(i, q) = c[i * 48 + q];
      }
    });
    return;
  }
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
