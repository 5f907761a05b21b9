// Device decoders of every storage dtype, 32 elements ("a chunk") at a time.
//
// Chunk c of a row covers elements [32c, 32c + 32). Quantized blocks hold 32,
// 64, 128 or 256 elements, so a chunk is always inside one block; decoding a
// chunk reads only the bytes it needs (plus the block's scales), so a warp
// whose lanes take consecutive chunks reads each weight byte once. Layouts
// follow core/dtype.h (ggml blocks, repacked MLX affine blocks) and mirror the
// CPU reference decoders in backend/cpu/quant_ref.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"

namespace brioche::cuda::detail {

__device__ __forceinline__ float f16_at(const uint8_t* p) { return __half2float(*reinterpret_cast<const __half*>(p)); }
__device__ __forceinline__ float f32_at(const uint8_t* p) { return *reinterpret_cast<const float*>(p); }

// 16 bytes from a 2-byte-aligned address (blocks of 18, 34 and 210 bytes).
__device__ __forceinline__ void load16_a2(const uint8_t* p, uint8_t out[16]) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    uint16_t w = __ldg(h + i);
    out[2 * i] = uint8_t(w);
    out[2 * i + 1] = uint8_t(w >> 8);
  }
}

// 16 bytes from a 4-byte-aligned address.
__device__ __forceinline__ void load16_a4(const uint8_t* p, uint8_t out[16]) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t v = __ldg(w + i);
#pragma unroll
    for (int b = 0; b < 4; ++b) out[4 * i + b] = uint8_t(v >> (8 * b));
  }
}

// 16 bytes from a 16-byte-aligned address, one vector load.
__device__ __forceinline__ void load16_a16(const uint8_t* p, uint8_t out[16]) {
  uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int b = 0; b < 4; ++b) out[4 * i + b] = uint8_t(words[i] >> (8 * b));
  }
}

__device__ __forceinline__ void k_scale_min(int j, const uint8_t* scales, float* sc, float* mn) {
  // 6-bit (scale, min) of sub-block j of a Q4_K/Q5_K super-block.
  if (j < 4) {
    *sc = float(scales[j] & 63);
    *mn = float(scales[j + 4] & 63);
  } else {
    *sc = float((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
    *mn = float((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

template <DType T>
struct Decoder;

template <>
struct Decoder<DType::Q8_0> {  // f16 d; int8 q[32]
  __device__ static void chunk(const uint8_t* row, int64_t c, float v[32]) {
    const uint8_t* b = row + c * 34;
    float d = f16_at(b);
    uint8_t q[32];
    load16_a2(b + 2, q);
    load16_a2(b + 18, q + 16);
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = d * float(int8_t(q[i]));
  }
};

template <>
struct Decoder<DType::Q4_0> {  // f16 d; q[16]: element i low nibble, i+16 high
  __device__ static void chunk(const uint8_t* row, int64_t c, float v[32]) {
    const uint8_t* b = row + c * 18;
    float d = f16_at(b);
    uint8_t q[16];
    load16_a2(b + 2, q);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      v[i] = d * float(int(q[i] & 0x0F) - 8);
      v[i + 16] = d * float(int(q[i] >> 4) - 8);
    }
  }
};

template <>
struct Decoder<DType::Q4_1> {  // f16 d, m; q[16]
  __device__ static void chunk(const uint8_t* row, int64_t c, float v[32]) {
    const uint8_t* b = row + c * 20;
    float d = f16_at(b), m = f16_at(b + 2);
    uint8_t q[16];
    load16_a4(b + 4, q);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      v[i] = d * float(q[i] & 0x0F) + m;
      v[i + 16] = d * float(q[i] >> 4) + m;
    }
  }
};

template <>
struct Decoder<DType::Q4_K> {  // f16 d, dmin; scales[12]; qs[128]
  __device__ static void chunk(const uint8_t* row, int64_t c, float v[32]) {
    const uint8_t* b = row + (c >> 3) * 144;
    const int j = int(c & 7);
    float sc, mn;
    k_scale_min(j, b + 4, &sc, &mn);
    const float dl = f16_at(b) * sc, ml = f16_at(b + 2) * mn;
    const uint8_t* qs = b + 16 + 32 * (j >> 1);
    const int shift = 4 * (j & 1);
    uint8_t q[32];
    load16_a16(qs, q);
    load16_a16(qs + 16, q + 16);
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = dl * float((q[i] >> shift) & 0x0F) - ml;
  }
};

template <>
struct Decoder<DType::Q5_K> {  // f16 d, dmin; scales[12]; qh[32]; qs[128]
  __device__ static void chunk(const uint8_t* row, int64_t c, float v[32]) {
    const uint8_t* b = row + (c >> 3) * 176;
    const int j = int(c & 7);
    float sc, mn;
    k_scale_min(j, b + 4, &sc, &mn);
    const float dl = f16_at(b) * sc, ml = f16_at(b + 2) * mn;
    const uint8_t* qs = b + 48 + 32 * (j >> 1);
    const int shift = 4 * (j & 1);
    uint8_t q[32], h[32];
    load16_a16(qs, q);
    load16_a16(qs + 16, q + 16);
    load16_a16(b + 16, h);
    load16_a16(b + 32, h + 16);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      int x = ((q[i] >> shift) & 0x0F) | (((h[i] >> j) & 1) << 4);
      v[i] = dl * float(x) - ml;
    }
  }
};

template <>
struct Decoder<DType::Q6_K> {  // ql[128]; qh[64]; int8 scales[16]; f16 d
  __device__ static void chunk(const uint8_t* row, int64_t c, float v[32]) {
    const uint8_t* b = row + (c >> 3) * 210;
    const int j = int(c & 7), half = j >> 2, t = j & 3;
    const float d = f16_at(b + 208);
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + 2 * t;
    const float s0 = d * float(scales[0]), s1 = d * float(scales[1]);
    uint8_t l[32], h[32];
    load16_a2(b + 64 * half + 32 * (t & 1), l);
    load16_a2(b + 64 * half + 32 * (t & 1) + 16, l + 16);
    load16_a2(b + 128 + 32 * half, h);
    load16_a2(b + 128 + 32 * half + 16, h + 16);
    const int lshift = 4 * (t >> 1), hshift = 2 * t;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      int x = ((l[i] >> lshift) & 0x0F) | (((h[i] >> hshift) & 3) << 4);
      v[i] = (i < 16 ? s0 : s1) * float(x - 32);
    }
  }
};

// MLX affine: f32 scale, f32 bias; q packed little-end first.
template <int kBits, int kGroup>
struct AffineDecoder {
  static constexpr int kBlockBytes = 8 + kGroup * kBits / 8;
  static constexpr int kChunksPerBlock = kGroup / 32;
  __device__ static void chunk(const uint8_t* row, int64_t c, float v[32]) {
    const uint8_t* b = row + (c / kChunksPerBlock) * kBlockBytes;
    const int sub = int(c % kChunksPerBlock);
    const float scale = f32_at(b), bias = f32_at(b + 4);
    const uint8_t* q = b + 8 + sub * 32 * kBits / 8;  // 8-byte aligned
    if constexpr (kBits == 4) {
      uint8_t p[16];
      load16_a4(q, p);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        v[2 * i] = scale * float(p[i] & 0x0F) + bias;
        v[2 * i + 1] = scale * float(p[i] >> 4) + bias;
      }
    } else {
      uint8_t p[32];
      load16_a4(q, p);
      load16_a4(q + 16, p + 16);
#pragma unroll
      for (int i = 0; i < 32; ++i) v[i] = scale * float(p[i]) + bias;
    }
  }
};

template <>
struct Decoder<DType::AFFINE4_G32> : AffineDecoder<4, 32> {};
template <>
struct Decoder<DType::AFFINE4_G64> : AffineDecoder<4, 64> {};
template <>
struct Decoder<DType::AFFINE4_G128> : AffineDecoder<4, 128> {};
template <>
struct Decoder<DType::AFFINE8_G32> : AffineDecoder<8, 32> {};
template <>
struct Decoder<DType::AFFINE8_G64> : AffineDecoder<8, 64> {};
template <>
struct Decoder<DType::AFFINE8_G128> : AffineDecoder<8, 128> {};

// Plain types, 32 elements from a row of T.
template <>
struct Decoder<DType::F32> {
  __device__ static void chunk(const uint8_t* row, int64_t c, float v[32]) {
    const float* p = reinterpret_cast<const float*>(row) + c * 32;
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = p[i];
  }
};
template <>
struct Decoder<DType::F16> {
  __device__ static void chunk(const uint8_t* row, int64_t c, float v[32]) {
    const __half* p = reinterpret_cast<const __half*>(row) + c * 32;
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = __half2float(p[i]);
  }
};
template <>
struct Decoder<DType::BF16> {
  __device__ static void chunk(const uint8_t* row, int64_t c, float v[32]) {
    const __nv_bfloat16* p = reinterpret_cast<const __nv_bfloat16*>(row) + c * 32;
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = __bfloat162float(p[i]);
  }
};

// Calls f.template operator()<T>() for the runtime dtype `t` (every dtype
// that has a Decoder); returns false for I32.
template <typename F>
bool visit_decodable(DType t, F&& f) {
  switch (t) {
    case DType::F32: f.template operator()<DType::F32>(); return true;
    case DType::F16: f.template operator()<DType::F16>(); return true;
    case DType::BF16: f.template operator()<DType::BF16>(); return true;
    case DType::Q8_0: f.template operator()<DType::Q8_0>(); return true;
    case DType::Q4_0: f.template operator()<DType::Q4_0>(); return true;
    case DType::Q4_1: f.template operator()<DType::Q4_1>(); return true;
    case DType::Q4_K: f.template operator()<DType::Q4_K>(); return true;
    case DType::Q5_K: f.template operator()<DType::Q5_K>(); return true;
    case DType::Q6_K: f.template operator()<DType::Q6_K>(); return true;
    case DType::AFFINE4_G32: f.template operator()<DType::AFFINE4_G32>(); return true;
    case DType::AFFINE4_G64: f.template operator()<DType::AFFINE4_G64>(); return true;
    case DType::AFFINE4_G128: f.template operator()<DType::AFFINE4_G128>(); return true;
    case DType::AFFINE8_G32: f.template operator()<DType::AFFINE8_G32>(); return true;
    case DType::AFFINE8_G64: f.template operator()<DType::AFFINE8_G64>(); return true;
    case DType::AFFINE8_G128: f.template operator()<DType::AFFINE8_G128>(); return true;
    case DType::I32: return false;
  }
  return false;
}

}  // namespace brioche::cuda::detail
