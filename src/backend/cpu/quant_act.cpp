#include "backend/cpu/quant_act.h"

#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace brioche::cpu {

void ActScratch::Free::operator()(void* p) const { std::free(p); }

char* ActScratch::reserve(size_t need) {
  if (need > bytes_) {
    size_t rounded = (need + 4095) & ~size_t(4095);
    buffer_.reset(std::aligned_alloc(64, rounded));
    bytes_ = rounded;
  }
  return static_cast<char*>(buffer_.get());
}

QuantizedActs ActScratch::layout(int64_t n_rows, int64_t k) {
  QuantizedActs acts;
  acts.n_rows = n_rows;
  acts.n_blocks = k / 32;
  acts.n_blocks_padded = (acts.n_blocks + 1) & ~int64_t(1);
  const size_t q_bytes = size_t(n_rows * acts.n_blocks_padded * 32);
  const size_t lane_bytes = size_t(n_rows * acts.n_blocks_padded * 8) * sizeof(float);
  char* base = reserve(q_bytes + 2 * lane_bytes);
  acts.q = reinterpret_cast<int8_t*>(base);
  acts.d_lanes = reinterpret_cast<float*>(base + q_bytes);
  acts.s_lanes = reinterpret_cast<float*>(base + q_bytes + lane_bytes);
  return acts;
}

ColumnActs ActScratch::layout_columns(int64_t n_rows, int64_t k) {
  ColumnActs acts;
  acts.n_rows = n_rows;
  acts.n_blocks = k / 32;
  acts.n_groups = (n_rows + ColumnActs::kGroup - 1) / ColumnActs::kGroup;
  const size_t q_bytes = size_t(acts.n_groups * acts.n_blocks * 512);
  const size_t f_bytes = size_t(acts.n_groups * acts.n_blocks * ColumnActs::kGroup) * sizeof(float);
  char* base = reserve(q_bytes + 2 * f_bytes);
  acts.q = reinterpret_cast<uint8_t*>(base);
  acts.d = reinterpret_cast<float*>(base + q_bytes);
  acts.s = reinterpret_cast<float*>(base + q_bytes + f_bytes);
  return acts;
}

BlockActs ActScratch::layout_blocks(int64_t n_rows, int64_t k) {
  BlockActs acts;
  acts.n_rows = n_rows;
  acts.n_blocks = k / 32;
  const size_t q_bytes = size_t(n_rows * acts.n_blocks * 32);
  char* base = reserve(q_bytes + 2 * size_t(n_rows * acts.n_blocks) * sizeof(float));
  acts.q = reinterpret_cast<int8_t*>(base);
  acts.d = reinterpret_cast<float*>(base + q_bytes);
  acts.s = acts.d + n_rows * acts.n_blocks;
  return acts;
}

namespace {

struct QuantizedBlock {
  __m256i q;          // 32 int8 in element order
  __m256i lane_sums;  // 8 int32: Σ of elements 4l..4l+3
  float d;            // scale: element i ≈ d * q_i
};

// AVX2 (the build baseline): per block, amax → scale, round to nearest
// (ties away from zero, like roundf), pack to int8, lane sums via maddubs.
inline QuantizedBlock quantize_block(const float* xb) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256i pack_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(xb + 8 * i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_mask, v[i]));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float max_abs = _mm_cvtss_f32(m4);
  const __m256 id = _mm256_set1_ps(max_abs != 0 ? 127.0f / max_abs : 0.0f);
  __m256i qi[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    __m256 s = _mm256_mul_ps(v[i], id);
    // round half away from zero: trunc(s + copysign(0.5, s))
    __m256 r5 = _mm256_or_ps(half, _mm256_and_ps(sign_mask, s));
    qi[i] = _mm256_cvttps_epi32(_mm256_add_ps(s, r5));
  }
  __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]);
  __m256i p23 = _mm256_packs_epi32(qi[2], qi[3]);
  __m256i p = _mm256_packs_epi16(p01, p23);
  p = _mm256_permutevar8x32_epi32(p, pack_order);  // undo the per-128 interleave
  // lane sums: Σ of 4 consecutive int8 = maddubs(1, q) then madd(.,1)
  const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p), _mm256_set1_epi16(1));
  return {p, sums, max_abs / 127.0f};
}

// Σq over a block: the 8 lane sums added (exact in int32).
inline int32_t block_sum(const QuantizedBlock& qb) {
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(qb.lane_sums), _mm256_extracti128_si256(qb.lane_sums, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
  return _mm_cvtsi128_si32(s4);
}

}  // namespace

void quantize_acts(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end, const QuantizedActs& acts) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* xr = x + r * ldx;
    int8_t* q = const_cast<int8_t*>(acts.q_row(r));
    float* dl = const_cast<float*>(acts.d_row(r));
    float* sl = const_cast<float*>(acts.s_row(r));
    for (int64_t b = 0; b < acts.n_blocks; ++b) {
      const QuantizedBlock qb = quantize_block(xr + 32 * b);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), qb.q);
      _mm256_storeu_ps(sl + 8 * b, _mm256_mul_ps(_mm256_cvtepi32_ps(qb.lane_sums), _mm256_set1_ps(qb.d)));
      _mm256_storeu_ps(dl + 8 * b, _mm256_set1_ps(qb.d));
    }
    for (int64_t b = acts.n_blocks; b < acts.n_blocks_padded; ++b) {
      std::memset(q + 32 * b, 0, 32);
      std::memset(dl + 8 * b, 0, 32);
      std::memset(sl + 8 * b, 0, 32);
    }
  }
}

void quantize_acts_columns(const float* x, int64_t ldx, int64_t octet_begin, int64_t octet_end,
                           const ColumnActs& acts) {
  constexpr int G = ColumnActs::kGroup;
  const __m256i flip = _mm256_set1_epi8(char(0x80));
  for (int64_t octet = octet_begin; octet < octet_end; ++octet) {
    const int64_t r0 = 8 * octet, g = r0 / G, lane0 = r0 % G;
    // An octet of padding only: its group has <= 8 rows, which the kernels
    // read as 8 lanes (matmul_columns.inc), so it is never read.
    if (r0 >= acts.n_rows) continue;
    for (int64_t b = 0; b < acts.n_blocks; ++b) {
      // q + 128 of 8 rows: quads[i] holds row r0+i's 8 quads (one per dword)
      __m256i quads[8];
      alignas(32) float d[8], s[8];
      for (int i = 0; i < 8; ++i) {
        if (r0 + i >= acts.n_rows) {  // padding: q = 0, d = s = 0
          quads[i] = flip;
          d[i] = s[i] = 0.0f;
          continue;
        }
        const QuantizedBlock qb = quantize_block(x + (r0 + i) * ldx + 32 * b);
        quads[i] = _mm256_xor_si256(qb.q, flip);
        d[i] = qb.d;
        s[i] = qb.d * float(block_sum(qb));
      }
      // 8x8 dword transpose: out[t] = quad t of the 8 rows, stored at lanes
      // lane0..lane0+7 of the (g, b) tile's vector t.
      __m256i t[8], u[8];
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(quads[i], quads[i + 1]);      // row i, i+1: quads 0,1 | 4,5
        t[i + 1] = _mm256_unpackhi_epi32(quads[i], quads[i + 1]);  // quads 2,3 | 6,7
      }
      for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);          // rows i..i+3: quad 0 | 4
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);      // quad 1 | 5
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);  // quad 2 | 6
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);  // quad 3 | 7
      }
      uint8_t* tile = const_cast<uint8_t*>(acts.q_at(g, b)) + 4 * lane0;
      for (int q = 0; q < 4; ++q) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(tile + 64 * q), _mm256_permute2x128_si256(u[q], u[q + 4], 0x20));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(tile + 64 * (q + 4)),
                            _mm256_permute2x128_si256(u[q], u[q + 4], 0x31));
      }
      _mm256_storeu_ps(const_cast<float*>(acts.d_at(g, b)) + lane0, _mm256_load_ps(d));
      _mm256_storeu_ps(const_cast<float*>(acts.s_at(g, b)) + lane0, _mm256_load_ps(s));
    }
  }
}

void quantize_acts_blocks(const float* x, int64_t ldx, const BlockActs& acts) {
  for (int64_t r = 0; r < acts.n_rows; ++r) {
    int8_t* q = acts.q + r * acts.n_blocks * 32;
    float* d = acts.d + r * acts.n_blocks;
    float* s = acts.s + r * acts.n_blocks;
    for (int64_t b = 0; b < acts.n_blocks; ++b) {
      const QuantizedBlock qb = quantize_block(x + r * ldx + 32 * b);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), qb.q);
      d[b] = qb.d;
      s[b] = qb.d * float(block_sum(qb));
    }
  }
}

}  // namespace brioche::cpu
