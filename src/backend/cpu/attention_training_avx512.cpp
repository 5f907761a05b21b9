// The CPU training attention (ops/attention_backward.h has the math) as
// blocked matrix products in AVX-512 registers. The vector loop it replaces
// (attention_backward.cpp, still the path without AVX-512) took one query
// row and one key at a time: a 64-float dot product with a horizontal sum
// per score and three 64-float axpys per key in the backward, ~20 GFLOP/s
// on one core. Here a block of up to 32 query rows meets all the keys it
// sees as a few small GEMMs (panel_gemm.h: 6 rows × 64 columns of
// accumulators, each B row loaded once for the 6 broadcasts):
//
//   forward, per (span, query head, block of query rows):
//     S = scale·Q_b·Kᵀ (through Kᵀ, keys contiguous), masked to −∞,
//     P = e^{S − max} row by row, O_b = P·V / Σ, lse = max + log Σ
//   backward, per (span, KV head, chunk of query blocks), for each query
//   head of the GQA group and block of the chunk:
//     P = e^{S − lse},  dP = dO_b·Vᵀ,  dS = scale·P⊙(dP − D), D_i = dO_i·O_i
//     dQ_b = dS·K,  dV_c += Pᵀ·dO_b,  dK_c += dSᵀ·Q_b
//   the chunks' dK_c and dV_c are partial sums in scratch, added at the end:
//   a span's rows split into chunks of about equal causal work, so the work
//   spreads over the threads even with one span and three KV heads.
//
// Scores of a block run to its last row's key only (causal); keys a row
// does not see (after it, another branch, outside the window) score −∞ and
// weigh exactly 0. No L×L matrix is kept: the strips are [32, keys].
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/attention_backward.h"
#include "backend/cpu/panel_gemm.h"
#include "core/thread_pool.h"

#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>

#include "backend/cpu/exp_avx512.h"

// GCC 12 flags the deliberately undefined registers inside its own AVX-512
// intrinsics (`__Y = __Y`) as uninitialized once they are inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace brioche::backend::cpu {

namespace {

constexpr int kBlock = 32;  // query rows per block
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

__mmask16 lanes(int n) { return n >= 16 ? __mmask16(0xffff) : n > 0 ? __mmask16((1u << n) - 1) : __mmask16(0); }

// out[rows, width] (+)= A[rows, T] · B[T, width], A element (r, t) at a[r·sr + t·st].
void gemm(int64_t rows, const float* a, int64_t sr, int64_t st, const float* b, int64_t ldb, int64_t T, int64_t width,
          float* out, int64_t ldo, bool accumulate) {
  panel_gemm_avx512({.a = a,
                     .sr = sr,
                     .st = st,
                     .b = b,
                     .ldb = ldb,
                     .out = out,
                     .ldo = ldo,
                     .rows = rows,
                     .width = width,
                     .T = T,
                     .accumulate = accumulate});
}

// row[j] = e^{row[j] − shift} for j < n (−∞ → 0); returns Σ row.
float exp_row(float* row, float shift, int64_t n) {
  const __m512 vs = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = lanes(int(std::min<int64_t>(16, n - j)));
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + j), vs));
    _mm512_mask_storeu_ps(row + j, m, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
  }
  return _mm512_reduce_add_ps(sum);
}

float max_row(const float* row, int64_t n) {
  __m512 m = _mm512_set1_ps(kNegInf);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = lanes(int(std::min<int64_t>(16, n - j)));
    m = _mm512_mask_max_ps(m, k, m, _mm512_loadu_ps(row + j));
  }
  return _mm512_reduce_max_ps(m);
}

float dot_row(const float* a, const float* b, int d) {
  __m512 acc = _mm512_setzero_ps();
  for (int c = 0; c < d; c += 16) {
    const __mmask16 m = lanes(d - c);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + c), _mm512_maskz_loadu_ps(m, b + c), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// Scores of query row i against keys [r0, r0 + n): scale·s where visible, −∞ elsewhere.
void mask_scores(const DenseAttentionArgs& a, int64_t i, int64_t r0, float* row, int64_t n) {
  const auto& layout = a.layout;
  const int window = a.params.sliding_window;
  const float scale = a.params.scale;
  const int64_t last = std::min<int64_t>(n, i - r0 + 1);  // keys after i are never seen
  for (int64_t j = 0; j < last; ++j) row[j] *= scale;
  for (int64_t j = last; j < n; ++j) row[j] = kNegInf;
  if (!layout.branch.empty()) {
    const uint8_t bi = layout.branch[size_t(i)];
    const uint8_t* br = layout.branch.data() + r0;
    for (int64_t j = 0; j < last; ++j)
      if (br[j] != 0 && br[j] != bi) row[j] = kNegInf;
  }
  if (window > 0) {
    const int32_t pi = layout.positions[size_t(i)];
    const int32_t* pos = layout.positions.data() + r0;
    for (int64_t j = 0; j < last; ++j)
      if (pi - pos[j] >= window) row[j] = kNegInf;
  }
}

// Kᵀ (or Vᵀ) of every KV head: t[h][c][row] = src[row, h·d + c], rows of all spans.
std::vector<float> transpose_heads(const float* src, int64_t ld, int64_t n_rows, int n_kv, int d) {
  std::vector<float> t(size_t(n_kv) * size_t(d) * size_t(n_rows));
  ThreadPool::global().parallel_for(n_rows, 64, [&](int64_t b, int64_t e) {
    for (int h = 0; h < n_kv; ++h)
      for (int c = 0; c < d; ++c) {
        float* dst = t.data() + (size_t(h) * size_t(d) + size_t(c)) * size_t(n_rows);
        for (int64_t r = b; r < e; ++r) dst[r] = src[r * ld + h * d + c];
      }
  });
  return t;
}

int64_t total_rows(const DenseAttentionArgs& a) {
  int64_t n = 0;
  for (const auto& s : a.layout.spans) n = std::max<int64_t>(n, int64_t(s.first_row) + s.n_rows);
  return n;
}

// S = Q_b·Kᵀ for query rows [i0, i1) of head h against keys [r0, i1), masked and scaled.
void block_scores(const DenseAttentionArgs& a, const float* kt, int64_t n_rows, int h, int64_t r0, int64_t i0,
                  int64_t i1, float* strip) {
  const int d = a.params.head_dim, kvh = h / (a.params.n_heads / a.params.n_kv_heads);
  const int64_t nk = i1 - r0;
  gemm(i1 - i0, a.q + i0 * a.ld_q + h * d, a.ld_q, 1, kt + size_t(kvh) * size_t(d) * size_t(n_rows) + r0, n_rows, d, nk,
       strip, nk, false);
  for (int64_t i = i0; i < i1; ++i) mask_scores(a, i, r0, strip + (i - i0) * nk, nk);
}

}  // namespace

void dense_attention_avx512(const DenseAttentionArgs& a) {
  const auto& p = a.params;
  const int d = p.head_dim, group = p.n_heads / p.n_kv_heads;
  const int64_t n_rows = total_rows(a);
  const std::vector<float> kt = transpose_heads(a.k, a.ld_k, n_rows, p.n_kv_heads, d);
  struct Task {
    int32_t span, head;
    int64_t i0, i1;
  };
  std::vector<Task> tasks;
  for (size_t s = 0; s < a.layout.spans.size(); ++s) {
    const auto& span = a.layout.spans[s];
    for (int64_t i0 = span.first_row + int64_t(span.n_rows - 1) / kBlock * kBlock; i0 >= span.first_row;
         i0 -= kBlock)  // the longest blocks first
      for (int h = 0; h < p.n_heads; ++h)
        tasks.push_back({int32_t(s), h, i0, std::min<int64_t>(i0 + kBlock, span.first_row + span.n_rows)});
  }
  ThreadPool::global().run(int(tasks.size()), [&](int t) {
    const Task& task = tasks[size_t(t)];
    const int64_t r0 = a.layout.spans[size_t(task.span)].first_row, nk = task.i1 - r0;
    thread_local std::vector<float> strip;
    strip.resize(size_t(kBlock) * size_t(nk));
    block_scores(a, kt.data(), n_rows, task.head, r0, task.i0, task.i1, strip.data());
    float inv[kBlock];
    for (int64_t i = task.i0; i < task.i1; ++i) {
      float* row = strip.data() + (i - task.i0) * nk;
      const float m = max_row(row, nk);
      const float sum = exp_row(row, m, nk);
      inv[i - task.i0] = 1.0f / sum;
      a.lse_w[i * a.ld_lse + task.head] = m + std::log(sum);
    }
    const int kvh = task.head / group;
    float* out = a.out_w + task.i0 * a.ld_out + task.head * d;
    gemm(task.i1 - task.i0, strip.data(), nk, 1, a.v + r0 * a.ld_v + kvh * d, a.ld_v, nk, d, out, a.ld_out, false);
    for (int64_t i = task.i0; i < task.i1; ++i) {
      float* o = out + (i - task.i0) * a.ld_out;
      for (int c = 0; c < d; ++c) o[c] *= inv[i - task.i0];
    }
  });
}

void dense_attention_backward_avx512(const DenseAttentionArgs& a) {
  const auto& p = a.params;
  const int d = p.head_dim, group = p.n_heads / p.n_kv_heads;
  const int64_t n_rows = total_rows(a);
  const std::vector<float> kt = transpose_heads(a.k, a.ld_k, n_rows, p.n_kv_heads, d);
  const std::vector<float> vt = transpose_heads(a.v, a.ld_v, n_rows, p.n_kv_heads, d);
  // Tasks: (span, KV head, chunk of query blocks); chunks of ~equal causal work.
  constexpr int kChunks = 4;
  struct Task {
    int32_t span, kvh;
    int64_t i0, i1;  // query rows of the chunk
    size_t scratch;  // offset of its dK, dV partials: 2 × [span rows, d]
  };
  std::vector<Task> tasks;
  size_t scratch_floats = 0;
  for (size_t s = 0; s < a.layout.spans.size(); ++s) {
    const auto& span = a.layout.spans[s];
    const int64_t n = span.n_rows, blocks = (n + kBlock - 1) / kBlock;
    const int chunks = int(std::min<int64_t>(kChunks, blocks));
    // Block b's work ∝ its keys (b + 1); chunk c ends where the cumulative work passes (c + 1)/chunks.
    std::vector<int64_t> ends;
    const double total = double(blocks) * double(blocks + 1) / 2;
    for (int64_t b = 0, c = 0; b < blocks; ++b) {
      const double done = double(b + 1) * double(b + 2) / 2;
      if (done >= total * double(c + 1) / chunks - 1e-9 || b == blocks - 1) {
        ends.push_back(b + 1);
        ++c;
      }
    }
    for (int kvh = 0; kvh < p.n_kv_heads; ++kvh) {
      int64_t b0 = 0;
      for (int64_t b1 : ends) {
        if (b1 <= b0) continue;
        tasks.push_back({int32_t(s), kvh, span.first_row + b0 * kBlock,
                         std::min<int64_t>(span.first_row + b1 * kBlock, span.first_row + n), scratch_floats});
        scratch_floats += size_t(2) * size_t(n) * size_t(d);
        b0 = b1;
      }
    }
  }
  std::vector<float> partial(scratch_floats);
  std::reverse(tasks.begin(), tasks.end());  // the heaviest chunks (last rows) first
  ThreadPool::global().run(int(tasks.size()), [&](int t) {
    const Task& task = tasks[size_t(t)];
    const auto& span = a.layout.spans[size_t(task.span)];
    const int64_t r0 = span.first_row;
    float* dk_part = partial.data() + task.scratch;  // [span rows, d], row j − r0
    float* dv_part = dk_part + size_t(span.n_rows) * size_t(d);
    std::memset(dk_part, 0, sizeof(float) * 2 * size_t(span.n_rows) * size_t(d));
    thread_local std::vector<float> probs, grads;
    probs.resize(size_t(kBlock) * size_t(task.i1 - r0));
    grads.resize(probs.size());
    for (int h = task.kvh * group; h < (task.kvh + 1) * group; ++h) {
      for (int64_t i0 = task.i0; i0 < task.i1; i0 += kBlock) {
        const int64_t i1 = std::min<int64_t>(i0 + kBlock, task.i1), rows = i1 - i0, nk = i1 - r0;
        block_scores(a, kt.data(), n_rows, h, r0, i0, i1, probs.data());
        // dP = dO_b·Vᵀ
        gemm(rows, a.dout + i0 * a.ld_dout + h * d, a.ld_dout, 1,
             vt.data() + size_t(task.kvh) * size_t(d) * size_t(n_rows) + r0, n_rows, d, nk, grads.data(), nk, false);
        for (int64_t i = i0; i < i1; ++i) {
          float* pr = probs.data() + (i - i0) * nk;
          float* gr = grads.data() + (i - i0) * nk;
          exp_row(pr, a.lse[i * a.ld_lse + h], nk);
          const float D = dot_row(a.dout + i * a.ld_dout + h * d, a.out + i * a.ld_out + h * d, d);
          const __m512 vD = _mm512_set1_ps(D), vs = _mm512_set1_ps(p.scale);
          for (int64_t j = 0; j < nk; j += 16) {  // dS = scale·P⊙(dP − D)
            const __mmask16 m = lanes(int(std::min<int64_t>(16, nk - j)));
            const __m512 pv = _mm512_maskz_loadu_ps(m, pr + j), gv = _mm512_maskz_loadu_ps(m, gr + j);
            _mm512_mask_storeu_ps(gr + j, m, _mm512_mul_ps(_mm512_mul_ps(pv, _mm512_sub_ps(gv, vD)), vs));
          }
        }
        // dQ_b = dS·K
        gemm(rows, grads.data(), nk, 1, a.k + r0 * a.ld_k + task.kvh * d, a.ld_k, nk, d, a.dq + i0 * a.ld_dq + h * d,
             a.ld_dq, false);
        // dV_c[keys] += Pᵀ·dO_b, dK_c[keys] += dSᵀ·Q_b
        gemm(nk, probs.data(), 1, nk, a.dout + i0 * a.ld_dout + h * d, a.ld_dout, rows, d, dv_part, d, true);
        gemm(nk, grads.data(), 1, nk, a.q + i0 * a.ld_q + h * d, a.ld_q, rows, d, dk_part, d, true);
      }
    }
  });
  // dK, dV = the chunks' partial sums.
  for (size_t s = 0; s < a.layout.spans.size(); ++s) {
    const auto& span = a.layout.spans[s];
    ThreadPool::global().parallel_for(span.n_rows, 16, [&](int64_t b, int64_t e) {
      for (int kvh = 0; kvh < p.n_kv_heads; ++kvh)
        for (int64_t j = b; j < e; ++j) {
          float* dk = a.dk + (span.first_row + j) * a.ld_dk + kvh * d;
          float* dv = a.dv + (span.first_row + j) * a.ld_dv + kvh * d;
          std::memset(dk, 0, sizeof(float) * size_t(d));
          std::memset(dv, 0, sizeof(float) * size_t(d));
          for (const Task& task : tasks) {
            if (size_t(task.span) != s || task.kvh != kvh) continue;
            const float* part = partial.data() + task.scratch;
            for (int c = 0; c < d; ++c) {
              dk[c] += part[j * d + c];
              dv[c] += part[(size_t(span.n_rows) + size_t(j)) * size_t(d) + size_t(c)];
            }
          }
        }
    });
  }
}

}  // namespace brioche::backend::cpu
