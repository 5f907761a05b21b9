// amx_gemm (amx_gemm.h): bf16 hi/lo packing with AVX512-BF16, products on
// AMX tiles. Tiles 0-3 hold a 32 × 32 block of f32 sums, 4-5 two 16-row A
// tiles (32 bf16 of t each), 6-7 two B tiles (16 pairs of t × 16 columns).
#include "backend/cpu/amx_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/quant_ref.h"
#include "core/error.h"
#include "core/thread_pool.h"

#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,amx-tile,amx-bf16")
#include <immintrin.h>

// GCC 12 flags the deliberately undefined registers inside its own AVX-512
// intrinsics (`__Y = __Y`) as uninitialized once they are inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace brioche::backend::cpu {

namespace {

constexpr int64_t kBlock = 32;  // output rows and columns per tile block (2 × 2 tiles)
constexpr bool kPrefetch = true;
constexpr int64_t kGroupRows = 64;  // A rows a task walks B with (64: 6-8% faster than 32 or 128)

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

__mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xffff) : n > 0 ? __mmask16((1u << n) - 1) : __mmask16(0); }

// bf16 bits of x rounded to nearest even (16 lanes), and x − those as f32.
inline __m256i to_bf16(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }
inline __m512 from_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

// 16 pairs (e[i], o[i]) as 32-bit lanes, e in the low half: B's VNNI layout.
inline __m512i pair(__m256i e, __m256i o) {
  return _mm512_or_si512(_mm512_cvtepu16_epi32(e), _mm512_slli_epi32(_mm512_cvtepu16_epi32(o), 16));
}

struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile: 16 rows of 64 bytes (16 f32 sums, 32 bf16 of A, 16 bf16 pairs of B).
void load_tile_config() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

// The packed operands of one call.
struct Packed {
  int64_t rows_pad, width_pad, t_pad;
  const uint16_t *a_hi, *a_lo;  // [rows_pad, t_pad]
  const uint16_t *b_hi, *b_lo;  // [t_pad / 2, width_pad, 2]: VNNI pairs of B rows
};

// Both operands are stored as whole tiles, 1 KB each, contiguous, so a tile
// load reads 16 consecutive lines: A's (16 rows, 32 of t) at
// [row / 16][t / 32][row % 16][t % 32], B's (16 pairs of t, 16 columns) at
// [column / 16][t / 32][(t % 32) / 2][column % 16][t % 2] (VNNI pairs).
inline int64_t tile_at(int64_t strip, int64_t chunk, int64_t chunks) { return (strip * chunks + chunk) * 512; }

// A rows [r0, r1) → hi (and lo) bf16 tiles, zero past rows × T.
void pack_a(const AmxGemm& g, const Packed& p, uint16_t* hi, uint16_t* lo, int64_t r0, int64_t r1) {
  const int64_t chunks = p.t_pad / 32;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t t = 0; t < p.t_pad; t += 16) {
      const int64_t at = tile_at(r / 16, t / 32, chunks) + (r % 16) * 32 + t % 32;
      const __m512 x = r < g.rows ? _mm512_maskz_loadu_ps(lanes(g.T - t), g.a + r * g.lda + t) : _mm512_setzero_ps();
      const __m256i xh = to_bf16(x);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + at), xh);
      if (g.split) _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + at), to_bf16(_mm512_sub_ps(x, from_bf16(xh))));
    }
  }
}

// Rows of B's source matrix as f32: row i at data + (i − first)·ld (B as
// stored, a decoded weight's rows, or a block of them in a thread's scratch).
struct SourceRows {
  const float* data;
  int64_t ld, first;
  const float* row(int64_t i) const { return data + (i - first) * ld; }
};

// B row pairs [q0, q1) → hi (and lo) VNNI tiles, zero past T × width.
void pack_b(SourceRows b, int64_t T, int64_t width, const Packed& p, bool split, uint16_t* hi, uint16_t* lo, int64_t q0,
            int64_t q1) {
  const int64_t chunks = p.t_pad / 32;
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t t0 = 2 * q;
    for (int64_t c = 0; c < p.width_pad; c += 16) {
      const __mmask16 m = lanes(width - c);
      const __m512 x0 = t0 < T ? _mm512_maskz_loadu_ps(m, b.row(t0) + c) : _mm512_setzero_ps();
      const __m512 x1 = t0 + 1 < T ? _mm512_maskz_loadu_ps(m, b.row(t0 + 1) + c) : _mm512_setzero_ps();
      const __m256i h0 = to_bf16(x0), h1 = to_bf16(x1);
      const int64_t at = tile_at(c / 16, t0 / 32, chunks) + (q % 16) * 32;
      _mm512_storeu_si512(hi + at, pair(h0, h1));
      if (split) {
        const __m256i l0 = to_bf16(_mm512_sub_ps(x0, from_bf16(h0))), l1 = to_bf16(_mm512_sub_ps(x1, from_bf16(h1)));
        _mm512_storeu_si512(lo + at, pair(l0, l1));
      }
    }
  }
}

// B stored transposed (W [width, T]): columns [c0, c1) → hi (and lo) VNNI
// tiles. A row of W is 16 pairs of t a chunk; its pairs go 16 words apart.
void pack_b_transposed(SourceRows b, int64_t T, int64_t width, const Packed& p, bool split, uint16_t* hi, uint16_t* lo,
                       int64_t c0, int64_t c1) {
  const int64_t chunks = p.t_pad / 32;
  const __m512i apart =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(16));
  for (int64_t c = c0; c < c1; ++c) {
    const float* row = c < width ? b.row(c) : nullptr;
    for (int64_t t = 0; t < p.t_pad; t += 32) {
      const __m512 x0 = row ? _mm512_maskz_loadu_ps(lanes(T - t), row + t) : _mm512_setzero_ps();
      const __m512 x1 = row ? _mm512_maskz_loadu_ps(lanes(T - t - 16), row + t + 16) : _mm512_setzero_ps();
      const __m256i h0 = to_bf16(x0), h1 = to_bf16(x1);
      const int64_t at = tile_at(c / 16, t / 32, chunks) + (c % 16) * 2;
      _mm512_i32scatter_epi32(hi + at, apart, _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1), 4);
      if (split) {
        const __m256i l0 = to_bf16(_mm512_sub_ps(x0, from_bf16(h0))), l1 = to_bf16(_mm512_sub_ps(x1, from_bf16(h1)));
        _mm512_i32scatter_epi32(lo + at, apart, _mm512_inserti64x4(_mm512_castsi256_si512(l0), l1, 1), 4);
      }
    }
  }
}

// sums[32 × 32] = A[r0 .. r0 + 32) · B[:, c0 .. c0 + 32) over all of t (the
// sums stay in tiles: passes over t in blocks, reloading them, measured slower).
void block(const Packed& p, bool split, int64_t r0, int64_t c0, float* sums) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int64_t chunks = p.t_pad / 32;
  const uint16_t* ah = p.a_hi + tile_at(r0 / 16, 0, chunks);
  const uint16_t* al = p.a_lo + tile_at(r0 / 16, 0, chunks);
  const uint16_t* bh = p.b_hi + tile_at(c0 / 16, 0, chunks);
  const uint16_t* bl = p.b_lo + tile_at(c0 / 16, 0, chunks);
  const int64_t next = chunks * 512;  // the next strip of 16 rows or columns
  for (int64_t kc = 0; kc < chunks; ++kc) {
    const int64_t at = kc * 512;
    if (kPrefetch && kc + 1 < chunks) {
      // The next chunk's tiles into L1 while these multiply (their loads from L2 stalled the products).
      for (const uint16_t* base : {ah, al, bh, bl})
        for (int64_t line = 0; line < 16; ++line) {
          _mm_prefetch(reinterpret_cast<const char*>(base + at + 512 + line * 32), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(base + next + at + 512 + line * 32), _MM_HINT_T0);
        }
    }
    _tile_loadd(4, ah + at, 64);
    _tile_loadd(5, ah + next + at, 64);
    _tile_loadd(6, bh + at, 64);
    _tile_loadd(7, bh + next + at, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
    if (!split) continue;
    _tile_loadd(6, bl + at, 64);
    _tile_loadd(7, bl + next + at, 64);
    _tile_dpbf16ps(0, 4, 6);  // hi·lo
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
    _tile_loadd(4, al + at, 64);
    _tile_loadd(5, al + next + at, 64);
    _tile_loadd(6, bh + at, 64);
    _tile_loadd(7, bh + next + at, 64);
    _tile_dpbf16ps(0, 4, 6);  // lo·hi
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, sums, 128);
  _tile_stored(1, sums + 16, 128);
  _tile_stored(2, sums + 16 * 32, 128);
  _tile_stored(3, sums + 16 * 32 + 16, 128);
}

// One thread's scratch, grown as needed (the calls come from the thread that runs the step).
template <typename T>
T* scratch(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

}  // namespace

void amx_gemm(const AmxGemm& g) {
  if (g.rows <= 0 || g.width <= 0) return;
  if (g.T <= 0) {
    if (!g.accumulate)
      for (int64_t r = 0; r < g.rows; ++r) std::memset(g.out + r * g.ldo, 0, size_t(g.width) * 4);
    return;
  }
  BRIOCHE_CHECK(!(g.b_tiles && g.split), "amx_gemm: packed weight tiles hold plain bf16, got split = true");
  thread_local std::vector<uint16_t> a_buf, b_buf;
  Packed p{.rows_pad = round_up(g.rows, kBlock), .width_pad = round_up(g.width, kBlock), .t_pad = round_up(g.T, 32)};
  const int64_t a_size = p.rows_pad * p.t_pad, b_size = p.t_pad * p.width_pad;
  uint16_t* a = scratch(a_buf, g.split ? 2 * a_size : a_size);
  p.a_hi = a;
  p.a_lo = g.split ? a + a_size : a;
  ThreadPool& pool = ThreadPool::global();
  pool.parallel_for(p.rows_pad, 16, [&](int64_t r0, int64_t r1) {
    pack_a(g, p, const_cast<uint16_t*>(p.a_hi), const_cast<uint16_t*>(p.a_lo), r0, r1);
  });
  if (g.b_tiles) {
    p.b_hi = p.b_lo = g.b_tiles;
  } else {
    uint16_t* b = scratch(b_buf, g.split ? 2 * b_size : b_size);
    uint16_t* b_lo = g.split ? b + b_size : b;
    p.b_hi = b;
    p.b_lo = b_lo;
    const SourceRows src{.data = g.b, .ld = g.ldb, .first = 0};
    if (g.b_transposed) {
      pool.parallel_for(p.width_pad, 16, [&](int64_t c0, int64_t c1) {
        pack_b_transposed(src, g.T, g.width, p, g.split, b, b_lo, c0, c1);
      });
    } else {
      pool.parallel_for(p.t_pad / 2, 16,
                        [&](int64_t q0, int64_t q1) { pack_b(src, g.T, g.width, p, g.split, b, b_lo, q0, q1); });
    }
  }
  const int64_t groups = (p.rows_pad + kGroupRows - 1) / kGroupRows;
  pool.parallel_for(groups, 1, [&](int64_t g0, int64_t g1) {
    load_tile_config();
    alignas(64) float sums[32 * 32];
    for (int64_t grp = g0; grp < g1; ++grp) {
      const int64_t r_begin = grp * kGroupRows, r_end = std::min(p.rows_pad, r_begin + kGroupRows);
      for (int64_t c0 = 0; c0 < p.width_pad; c0 += kBlock)
        for (int64_t r0 = r_begin; r0 < r_end; r0 += kBlock) {
          block(p, g.split, r0, c0, sums);
          // The block's sums into out.
          const __mmask16 m0 = lanes(g.width - c0), m1 = lanes(g.width - c0 - 16);
          for (int64_t r = r0; r < std::min(r0 + kBlock, g.rows); ++r) {
            float* dst = g.out + r * g.ldo + c0;
            __m512 v0 = _mm512_load_ps(sums + (r - r0) * 32), v1 = _mm512_load_ps(sums + (r - r0) * 32 + 16);
            if (g.accumulate) {
              v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, dst));
              v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, dst + 16));
            }
            _mm512_mask_storeu_ps(dst, m0, v0);
            _mm512_mask_storeu_ps(dst + 16, m1, v1);
          }
        }
    }
    _tile_release();
  });
}

namespace {

struct WeightShape {
  int64_t T, width;
};
WeightShape weight_shape(const AmxWeight& w) {
  return w.product == AmxWeightProduct::Forward ? WeightShape{w.k, w.m} : WeightShape{w.m, w.k};
}

}  // namespace

size_t amx_weight_tiles_size(const AmxWeight& w) {
  const WeightShape s = weight_shape(w);
  return size_t(round_up(s.T, 32) * round_up(s.width, kBlock));
}

// Forward: a task decodes 16 rows of W (16 columns of B, one strip of
// tiles); InputGrad: 32 rows (one chunk of t across every strip). Each
// thread decodes into its own [≤ 32, k] f32 block, which the packing reads
// while it is still in cache.
void amx_pack_weight(const AmxWeight& w, uint16_t* tiles) {
  const WeightShape s = weight_shape(w);
  const Packed p{.rows_pad = 0, .width_pad = round_up(s.width, kBlock), .t_pad = round_up(s.T, 32)};
  const bool forward = w.product == AmxWeightProduct::Forward;
  const int64_t block_rows = forward ? 16 : 32;
  const int64_t blocks = (forward ? p.width_pad : p.t_pad) / block_rows;
  ThreadPool::global().parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> decoded;  // [block_rows, k]
    float* rows = scratch(decoded, block_rows * w.k);
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t r0 = blk * block_rows, r1 = std::min(w.m, r0 + block_rows);
      for (int64_t r = r0; r < r1; ++r)
        ::brioche::cpu::dequantize_row_ref(w.wtype, static_cast<const char*>(w.w) + size_t(r) * w.w_row_bytes,
                                           rows + (r - r0) * w.k, w.k);
      const SourceRows src{.data = rows, .ld = w.k, .first = r0};
      if (forward)
        pack_b_transposed(src, s.T, s.width, p, false, tiles, tiles, r0, r0 + block_rows);
      else
        pack_b(src, s.T, s.width, p, false, tiles, tiles, r0 / 2, (r0 + block_rows) / 2);
    }
  });
}

}  // namespace brioche::backend::cpu
