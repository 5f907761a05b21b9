#include "backend/cpu/quant_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace brioche::cpu {

namespace {

float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}
void store_f16(uint8_t* p, float f) {
  uint16_t h = f32_to_f16(f);
  std::memcpy(p, &h, 2);
}
float load_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
void store_f32(uint8_t* p, float f) { std::memcpy(p, &f, 4); }

// ---- decoders (x = value of element i of the block) ----

void dequant_q8_0(const uint8_t* b, float* y) {
  float d = load_f16(b);
  for (int i = 0; i < 32; ++i) y[i] = d * float(int8_t(b[2 + i]));
}

void dequant_q4_0(const uint8_t* b, float* y) {
  float d = load_f16(b);
  for (int i = 0; i < 16; ++i) {
    y[i] = d * float((b[2 + i] & 0x0F) - 8);
    y[i + 16] = d * float((b[2 + i] >> 4) - 8);
  }
}

void dequant_q4_1(const uint8_t* b, float* y) {
  float d = load_f16(b), m = load_f16(b + 2);
  for (int i = 0; i < 16; ++i) {
    y[i] = d * float(b[4 + i] & 0x0F) + m;
    y[i + 16] = d * float(b[4 + i] >> 4) + m;
  }
}

// Q4_K: 8 sub-blocks of 32; pair p of sub-blocks shares qs[32p..32p+32):
// low nibbles -> sub-block 2p, high nibbles -> 2p+1.
void dequant_q4_k(const uint8_t* b, float* y) {
  float d = load_f16(b), dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, mn;
    k_quant_scale_min(j, scales, &sc, &mn);
    float dl = d * sc, ml = dmin * mn;
    const uint8_t* q = qs + 32 * (j / 2);
    int shift = 4 * (j % 2);
    for (int i = 0; i < 32; ++i) y[32 * j + i] = dl * float((q[i] >> shift) & 0x0F) - ml;
  }
}

// Q5_K: as Q4_K plus a fifth bit: bit j of qh[i] for element i of sub-block j.
void dequant_q5_k(const uint8_t* b, float* y) {
  float d = load_f16(b), dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, mn;
    k_quant_scale_min(j, scales, &sc, &mn);
    float dl = d * sc, ml = dmin * mn;
    const uint8_t* q = qs + 32 * (j / 2);
    int shift = 4 * (j % 2);
    for (int i = 0; i < 32; ++i) {
      int v = ((q[i] >> shift) & 0x0F) | (((qh[i] >> j) & 1) << 4);
      y[32 * j + i] = dl * float(v) - ml;
    }
  }
}

// Q6_K: two halves of 128; in half h, sub-block t (0..3) of 32 takes low (t<2)
// or high (t>=2) nibbles of ql[64h + 32(t&1) + i] and bits 2t..2t+1 of
// qh[32h + i]; each 16 elements have their own int8 scale. x = d*sc*(q-32).
void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  float d = load_f16(b + 208);
  for (int j = 0; j < 8; ++j) {
    int h = j / 4, t = j % 4;
    const uint8_t* l = ql + 64 * h + 32 * (t & 1);
    const uint8_t* hh = qh + 32 * h;
    for (int i = 0; i < 32; ++i) {
      int v = ((l[i] >> (4 * (t >> 1))) & 0x0F) | (((hh[i] >> (2 * t)) & 3) << 4);
      y[32 * j + i] = d * float(sc[8 * h + 2 * t + i / 16]) * float(v - 32);
    }
  }
}

// MLX affine: f32 scale, f32 bias, then q packed little-end first.
void dequant_affine(const uint8_t* b, float* y, int group, int bits) {
  float scale = load_f32(b), bias = load_f32(b + 4);
  const uint8_t* q = b + 8;
  for (int i = 0; i < group; ++i) {
    int v = bits == 8 ? q[i] : (q[i / 2] >> (4 * (i % 2))) & 0x0F;
    y[i] = scale * float(v) + bias;
  }
}

// ---- encoders ----

void quant_q8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
  store_f16(b, d);
  for (int i = 0; i < 32; ++i) b[2 + i] = uint8_t(int8_t(std::roundf(x[i] * id)));
}

void quant_q4_0(const float* x, uint8_t* b) {
  float amax = 0, max = 0;  // max keeps the sign of the largest-magnitude value
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  float d = max / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
  store_f16(b, d);
  for (int i = 0; i < 16; ++i) {
    uint8_t lo = uint8_t(std::min<int8_t>(15, int8_t(x[i] * id + 8.5f)));
    uint8_t hi = uint8_t(std::min<int8_t>(15, int8_t(x[i + 16] * id + 8.5f)));
    b[2 + i] = uint8_t(lo | (hi << 4));
  }
}

void quant_q4_1(const float* x, uint8_t* b) {
  float mn = x[0], mx = x[0];
  for (int i = 1; i < 32; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  float d = (mx - mn) / 15.0f, id = d != 0 ? 1.0f / d : 0.0f;
  store_f16(b, d);
  store_f16(b + 2, mn);
  for (int i = 0; i < 16; ++i) {
    uint8_t lo = uint8_t(std::min<int8_t>(15, int8_t((x[i] - mn) * id + 0.5f)));
    uint8_t hi = uint8_t(std::min<int8_t>(15, int8_t((x[i + 16] - mn) * id + 0.5f)));
    b[4 + i] = uint8_t(lo | (hi << 4));
  }
}

// Packs 8 six-bit scales and mins into the 12-byte Q4_K/Q5_K layout
// (inverse of k_quant_scale_min).
void pack_k_scales(const uint8_t* sc, const uint8_t* mn, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = uint8_t((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    out[j + 8] = uint8_t((sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4));
  }
}

// Shared by Q4_K (max_q 15) and Q5_K (max_q 31): per sub-block x ≈ s*q - m with
// m = -min(0, min x), s = (max x + m)/max_q; s and m are then quantized to
// 6 bits against super-block scales d = max s/63, dmin = max m/63.
void quant_k_sub_scales(const float* x, int max_q, float* d_out, float* dmin_out, uint8_t* sc, uint8_t* mn, int* q) {
  float s[8], m[8], max_s = 0, max_m = 0;
  for (int j = 0; j < 8; ++j) {
    float lo = x[32 * j], hi = x[32 * j];
    for (int i = 1; i < 32; ++i) {
      lo = std::min(lo, x[32 * j + i]);
      hi = std::max(hi, x[32 * j + i]);
    }
    m[j] = lo < 0 ? -lo : 0.0f;
    s[j] = (hi + m[j]) / float(max_q);
    max_s = std::max(max_s, s[j]);
    max_m = std::max(max_m, m[j]);
  }
  float d = f16_to_f32(f32_to_f16(max_s / 63.0f));
  float dmin = f16_to_f32(f32_to_f16(max_m / 63.0f));
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0 ? uint8_t(std::min(63, int(std::lround(s[j] / d)))) : 0;
    // Round the min up so every x stays representable (q >= 0 after shifting).
    mn[j] = dmin > 0 ? uint8_t(std::min(63, int(std::ceil(m[j] / dmin - 1e-4f)))) : 0;
    float dl = d * sc[j], ml = dmin * mn[j];
    for (int i = 0; i < 32; ++i) {
      int v = dl > 0 ? int(std::lround((x[32 * j + i] + ml) / dl)) : 0;
      q[32 * j + i] = std::clamp(v, 0, max_q);
    }
  }
  *d_out = d;
  *dmin_out = dmin;
}

void quant_q4_k(const float* x, uint8_t* b) {
  float d, dmin;
  uint8_t sc[8], mn[8];
  int q[256];
  quant_k_sub_scales(x, 15, &d, &dmin, sc, mn, q);
  store_f16(b, d);
  store_f16(b + 2, dmin);
  pack_k_scales(sc, mn, b + 4);
  uint8_t* qs = b + 16;
  for (int p = 0; p < 4; ++p)
    for (int i = 0; i < 32; ++i) qs[32 * p + i] = uint8_t(q[64 * p + i] | (q[64 * p + 32 + i] << 4));
}

void quant_q5_k(const float* x, uint8_t* b) {
  float d, dmin;
  uint8_t sc[8], mn[8];
  int q[256];
  quant_k_sub_scales(x, 31, &d, &dmin, sc, mn, q);
  store_f16(b, d);
  store_f16(b + 2, dmin);
  pack_k_scales(sc, mn, b + 4);
  uint8_t* qh = b + 16;
  uint8_t* qs = b + 48;
  std::memset(qh, 0, 32);
  for (int p = 0; p < 4; ++p)
    for (int i = 0; i < 32; ++i) qs[32 * p + i] = uint8_t((q[64 * p + i] & 15) | ((q[64 * p + 32 + i] & 15) << 4));
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 32; ++i) qh[i] |= uint8_t(((q[32 * j + i] >> 4) & 1) << j);
}

// Q6_K: per 16 elements a signed scale s = v/-32 (v = largest-magnitude value),
// then int8 scales against d = max|s|/127, q = round(x/(d*sc)) + 32 in [0, 63].
void quant_q6_k(const float* x, uint8_t* b) {
  float s[16], max_abs_s = 0, max_s = 0;
  for (int g = 0; g < 16; ++g) {
    float amax = 0, v = 0;
    for (int i = 0; i < 16; ++i)
      if (std::fabs(x[16 * g + i]) > amax) {
        amax = std::fabs(x[16 * g + i]);
        v = x[16 * g + i];
      }
    s[g] = v / -32.0f;
    if (std::fabs(s[g]) > max_abs_s) {
      max_abs_s = std::fabs(s[g]);
      max_s = s[g];
    }
  }
  float d = f16_to_f32(f32_to_f16(max_s / -127.0f));
  int8_t* sc = reinterpret_cast<int8_t*>(b + 192);
  int q[256];
  for (int g = 0; g < 16; ++g) {
    sc[g] = d != 0 ? int8_t(std::clamp(int(std::lround(s[g] / d)), -127, 127)) : 0;
    float dl = d * sc[g];
    for (int i = 0; i < 16; ++i) {
      int v = dl != 0 ? int(std::lround(x[16 * g + i] / dl)) : 0;
      q[16 * g + i] = std::clamp(v, -32, 31) + 32;
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  std::memset(ql, 0, 128);
  std::memset(qh, 0, 64);
  for (int j = 0; j < 8; ++j) {
    int h = j / 4, t = j % 4;
    for (int i = 0; i < 32; ++i) {
      int v = q[32 * j + i];
      ql[64 * h + 32 * (t & 1) + i] |= uint8_t((v & 15) << (4 * (t >> 1)));
      qh[32 * h + i] |= uint8_t((v >> 4) << (2 * t));
    }
  }
  store_f16(b + 208, d);
}

void quant_affine(const float* x, uint8_t* b, int group, int bits) {
  float mn = x[0], mx = x[0];
  for (int i = 1; i < group; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  int max_q = (1 << bits) - 1;
  float scale = (mx - mn) / float(max_q);
  store_f32(b, scale);
  store_f32(b + 4, mn);
  uint8_t* q = b + 8;
  if (bits == 4) std::memset(q, 0, size_t(group / 2));
  for (int i = 0; i < group; ++i) {
    int v = scale > 0 ? std::clamp(int(std::lround((x[i] - mn) / scale)), 0, max_q) : 0;
    if (bits == 8)
      q[i] = uint8_t(v);
    else
      q[i / 2] |= uint8_t(v << (4 * (i % 2)));
  }
}

void check_row(DType dtype, int64_t n, const char* what) {
  int be = dtype_info(dtype).block_elems;
  BRIOCHE_CHECK(n >= 0 && n % be == 0, what, ": row of ", n, " elements is not a multiple of the ", dtype_name(dtype),
                " block (", be, ")");
  BRIOCHE_CHECK(dtype != DType::I32, what, ": i32 is an index type, not a float storage type");
}

}  // namespace

void dequantize_row_ref(DType dtype, const void* src, float* dst, int64_t n) {
  check_row(dtype, n, "dequantize_row");
  const auto* s = static_cast<const uint8_t*>(src);
  const auto info = dtype_info(dtype);
  const int64_t nb = n / info.block_elems;
  switch (dtype) {
    case DType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(s + 2 * i);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    default: break;
  }
  for (int64_t ib = 0; ib < nb; ++ib) {
    const uint8_t* b = s + ib * info.block_bytes;
    float* y = dst + ib * info.block_elems;
    switch (dtype) {
      case DType::Q8_0: dequant_q8_0(b, y); break;
      case DType::Q4_0: dequant_q4_0(b, y); break;
      case DType::Q4_1: dequant_q4_1(b, y); break;
      case DType::Q4_K: dequant_q4_k(b, y); break;
      case DType::Q5_K: dequant_q5_k(b, y); break;
      case DType::Q6_K: dequant_q6_k(b, y); break;
      // The affine types. "== 4 ? 4 : 8" shows g++ 12 the only bit widths:
      // affine_bits(dtype) alone draws a false -Wstringop-overflow on
      // quant_affine's memset.
      default: dequant_affine(b, y, info.block_elems, affine_bits(dtype) == 4 ? 4 : 8); break;
    }
  }
}

void quantize_row_ref(DType dtype, const float* src, void* dst, int64_t n) {
  check_row(dtype, n, "quantize_row");
  auto* d = static_cast<uint8_t*>(dst);
  const auto info = dtype_info(dtype);
  const int64_t nb = n / info.block_elems;
  switch (dtype) {
    case DType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) store_f16(d + 2 * i, src[i]);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(d + 2 * i, &h, 2);
      }
      return;
    default: break;
  }
  for (int64_t ib = 0; ib < nb; ++ib) {
    const float* x = src + ib * info.block_elems;
    uint8_t* b = d + ib * info.block_bytes;
    switch (dtype) {
      case DType::Q8_0: quant_q8_0(x, b); break;
      case DType::Q4_0: quant_q4_0(x, b); break;
      case DType::Q4_1: quant_q4_1(x, b); break;
      case DType::Q4_K: quant_q4_k(x, b); break;
      case DType::Q5_K: quant_q5_k(x, b); break;
      case DType::Q6_K: quant_q6_k(x, b); break;
      // (The affine types, as in dequantize_row_ref.)
      default: quant_affine(x, b, info.block_elems, affine_bits(dtype) == 4 ? 4 : 8); break;
    }
  }
}

}  // namespace brioche::cpu
