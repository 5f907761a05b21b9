// Integer GEMV (gemv_int8.cuh) for MLX affine weights: groups of G = 32, 64
// or 128 values stored as f32 scale, f32 bias, then the 4- or 8-bit q packed
// little-end first (core/dtype.h). A lane takes one 32-value x block per
// step, the part of its group that block covers (gemv_int8.cuh has the
// math: affine8_centered, affine4_in_order, affine_offset).
#include "backend/cuda/gemv_int8.cuh"

namespace brioche::cuda::detail {

// One 32-value x block per lane and step (block c = lane, lane + 32, ...).
template <DType T>
requires(affine_bits(T) != 0) struct Dot<T> {
  static constexpr int kBits = affine_bits(T), kGroup = dtype_info(T).block_elems;
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
    const uint8_t* q = group + 8 + (c * 32 % kGroup) * kBits / 8;
    const uint2 sb = load_weight_u64(group);  // f32 scale, f32 bias
    Share b;
    b.scale = __uint_as_float(sb.x);
    b.offset = affine_offset<kBits>(b.scale, __uint_as_float(sb.y));
    if constexpr (kBits == 8) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint2 v = load_weight_u64(q + 8 * i);
        b.q[2 * i] = affine8_centered(v.x);
        b.q[2 * i + 1] = affine8_centered(v.y);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint2 v = load_weight_u64(q + 8 * i);
        const AffineNibbles lo = affine4_in_order(v.x), hi = affine4_in_order(v.y);
        b.q[4 * i] = lo.first, b.q[4 * i + 1] = lo.second, b.q[4 * i + 2] = hi.first, b.q[4 * i + 3] = hi.second;
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
