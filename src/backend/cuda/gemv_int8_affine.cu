// Integer GEMV (gemv_int8.cuh) for MLX affine weights: groups of G = 32, 64
// or 128 values stored as f32 scale, f32 bias, then the 4- or 8-bit q packed
// little-end first (core/dtype.h). A lane takes one 32-value x block per
// step, the part of its group that block covers: w = scale·q + bias, so
//   Σ w·x = scale·dx·Σ q·xq + bias·sx      (sx = dx·Σ xq, as for Q4_1).
// 8-bit q (0..255) is taken as q − 128 (a signed byte: q xor 0x80) for the
// signed __dp4a, which adds 128·scale·sx back:
//   Σ w·x = scale·dx·Σ (q − 128)·xq + (128·scale + bias)·sx.
// A 4-bit byte holds elements 2i (low nibble) and 2i + 1 (high): the masked
// nibbles are the even and the odd elements, interleaved back into x's order
// by two byte permutes per word.
#include "backend/cuda/gemv_int8.cuh"

namespace brioche::cuda::detail {

namespace {

// Bits and group size of an affine type.
template <DType T>
struct AffineFormat;
template <>
struct AffineFormat<DType::AFFINE4_G32> { static constexpr int kBits = 4, kGroup = 32; };
template <>
struct AffineFormat<DType::AFFINE4_G64> { static constexpr int kBits = 4, kGroup = 64; };
template <>
struct AffineFormat<DType::AFFINE4_G128> { static constexpr int kBits = 4, kGroup = 128; };
template <>
struct AffineFormat<DType::AFFINE8_G32> { static constexpr int kBits = 8, kGroup = 32; };
template <>
struct AffineFormat<DType::AFFINE8_G64> { static constexpr int kBits = 8, kGroup = 64; };
template <>
struct AffineFormat<DType::AFFINE8_G128> { static constexpr int kBits = 8, kGroup = 128; };

}  // namespace

// One 32-value x block per lane and step (block c = lane, lane + 32, ...).
template <DType T>
  requires requires { AffineFormat<T>::kBits; }
struct Dot<T> {
  static constexpr int kBits = AffineFormat<T>::kBits, kGroup = AffineFormat<T>::kGroup;
  static constexpr int kGroupBytes = 8 + kGroup * kBits / 8;
  using Lane = BlockLane;
  using XShare = Block32Acts;
  static constexpr int kStride = 32;
  static constexpr bool pair_rows(int) { return false; }
  struct Share {
    float scale, offset;  // offset: bias, or 128·scale + bias for 8 bits
    int q[8];             // the block's 32 values as signed bytes, in x's order
  };
  __device__ static int64_t steps(const Int8Acts& x) { return x.n_blocks; }
  __device__ static XShare load_x(const Int8Acts& x, int r, int64_t c, const Lane&) {
    return load_block32_acts(x, r, c);
  }
  // Groups and their q start 8-byte aligned (gemv_int8_covers).
  __device__ static Share load(const uint8_t* w, int64_t c, const Lane&) {
    const uint8_t* group = w + (c * 32 / kGroup) * kGroupBytes;
    const uint2* q = reinterpret_cast<const uint2*>(group + 8 + (c * 32 % kGroup) * kBits / 8);
    const float2 sb = __ldg(reinterpret_cast<const float2*>(group));
    Share b;
    b.scale = sb.x;
    if constexpr (kBits == 8) {
      b.offset = fmaf(128.0f, sb.x, sb.y);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint2 v = __ldg(q + i);
        b.q[2 * i] = int(v.x ^ 0x80808080u);
        b.q[2 * i + 1] = int(v.y ^ 0x80808080u);
      }
    } else {
      b.offset = sb.y;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint2 v = __ldg(q + i);
        const uint32_t words[2] = {v.x, v.y};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          // Word 2i + j holds elements 8(2i + j) .. + 7.
          const uint32_t even = words[j] & 0x0F0F0F0Fu, odd = (words[j] >> 4) & 0x0F0F0F0Fu;
          b.q[4 * i + 2 * j] = int(__byte_perm(even, odd, 0x5140));
          b.q[4 * i + 2 * j + 1] = int(__byte_perm(even, odd, 0x7362));
        }
      }
    }
    return b;
  }
  __device__ static float term(const Share& b, const XShare& x) {
    return b.scale * x.ds.x * float(dot16(b.q + 4, x.hi, dot16(b.q, x.lo, 0))) + b.offset * x.ds.y;
  }
};

void gemv_int8_affine(DType wtype, const GemvArgs& a, const Int8Acts& x) {
  switch (wtype) {
    case DType::AFFINE4_G32: return launch_int8<DType::AFFINE4_G32>(a, x);
    case DType::AFFINE4_G64: return launch_int8<DType::AFFINE4_G64>(a, x);
    case DType::AFFINE4_G128: return launch_int8<DType::AFFINE4_G128>(a, x);
    case DType::AFFINE8_G32: return launch_int8<DType::AFFINE8_G32>(a, x);
    case DType::AFFINE8_G64: return launch_int8<DType::AFFINE8_G64>(a, x);
    case DType::AFFINE8_G128: return launch_int8<DType::AFFINE8_G128>(a, x);
    default: fail("gemv_int8_affine: ", dtype_name(wtype), " is not an MLX affine type");
  }
}

}  // namespace brioche::cuda::detail
