// Integer GEMV kernels (see gemv_int8.h): shared pieces.
//
// Activations. Row r of x is cut into 32-value blocks b with scale
//   dx_b = max|x_b| / 127,   xq_i = round(x_i / dx_b)  (int8),
//   sx_b = dx_b · Σ_i xq_i   (the block's sum, for weights with an offset).
// A weight sub-block of 32 values aligned with x block b, decoded as
// w_i = dw · q_i + mw (q small integers, dw/mw its scale and offset), gives
//   Σ_i w_i x_i ≈ dw · dx_b · Σ_i q_i xq_i + mw · sx_b,
// so the inner sum is __dp4a on int8 lanes (4 products per instruction) and
// the floats are touched once per 32 values.
//
// Work split: one warp per weight row (the grid strides over rows and is
// sized to one resident wave); lanes take consecutive pieces of the row, so
// each weight byte is read once, coalesced. Every weight piece is unpacked to
// int8 lanes with a few bit operations, then reused for all n ≤ 8 x rows.
// Each dtype has a Dot<T> that says how a lane walks a row (Lane: its first
// step; kStride, steps), what it decodes of one weight row at a step (load →
// Share), what it reads of one x row there (load_x → XShare) and their
// product (term), and whether a plain launch's warps take rows in pairs
// (pair_rows). dot_rows below walks one or two weight rows (SwiGLU's gate and
// up, or a pair of rows) with it, reading each x share once for both, and the
// warp sums the lanes. The per-row order of operations does not depend on the
// launch (grid, parts, fusion), so fused and unfused launches on these
// kernels give bit-identical outputs. (Big one-row Q8_0/Q4_0/Q4_K/Q5_K/Q6_K
// launches go to gemv_stream_rows.cu instead, which sums in another order: a
// fused Q/K/V launch taken there and K alone, below its 8 MB, agree to
// rounding only.)
#pragma once

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/gemv_int8.h"
#include "backend/cuda/runtime.h"

namespace brioche::cuda::detail {

inline constexpr int kInt8Warps = 4;  // weight rows in flight per CTA

#ifdef __CUDACC__
__device__ __forceinline__ float half_lo(uint32_t w) { return __half2float(__ushort_as_half(uint16_t(w))); }
__device__ __forceinline__ float half_hi(uint32_t w) { return __half2float(__ushort_as_half(uint16_t(w >> 16))); }
// Weight loads, under evict_first_policy (gemv.cuh): SmolLM2-135M decode
// run ahead, A/B in one call: Q4_1 1,724.7–1,725.3 → 1,744.7–1,746.3
// tokens/s, Q8_0 1,660.4–1,660.7 → 1,667.6–1,674.0; Llama-3-8B Q4_0 at 4
// rows 1,084.0–1,089.3 → 1,096.1–1,096.2. (The bf16 warp kernel's loads
// under it too lost: SmolLM2 bf16 1,854–1,857 → 1,833–1,844.)
__device__ __forceinline__ uint32_t load_weight_u32(const uint8_t* p) {
  uint32_t v;
  asm("ld.global.nc.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(evict_first_policy()));
  return v;
}
__device__ __forceinline__ uint2 load_weight_u64(const uint8_t* p) {
  uint2 v;
  asm("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
      : "=r"(v.x), "=r"(v.y)
      : "l"(p), "l"(evict_first_policy()));
  return v;
}
__device__ __forceinline__ uint4 load_weight_u128(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(evict_first_policy()));
  return v;
}
__device__ __forceinline__ int4 ldg_x16(const int8_t* p) { return __ldg(reinterpret_cast<const int4*>(p)); }
__device__ __forceinline__ int2 ldg_x8(const int8_t* p) { return __ldg(reinterpret_cast<const int2*>(p)); }
__device__ __forceinline__ float4 ldg_ds2(const float2* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

// A 32-value block's scale dx = max|x_b| / 127 and the inverse that
// quantizes it (0 for a block of zeros).
struct BlockScale {
  float d, inv;
};
__device__ __forceinline__ BlockScale block_scale(float amax) {
  return {amax / 127.0f, amax > 0.0f ? 127.0f / amax : 0.0f};
}

// Quantizes one 32-value block held a value per lane (lane i: value i) into
// q[0..31] and ds (dx, dx · Σq): the bits of gemv_int8.cu's quantization
// kernels on the same values (max and integer sums do not depend on the
// order). All 32 lanes must call it.
__device__ __forceinline__ void quantize_block_of_warp(float v, int8_t* __restrict__ q, float2* __restrict__ ds) {
  float amax = fabsf(v);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const BlockScale s = block_scale(amax);
  const int qi = __float2int_rn(v * s.inv);
  int sum = qi;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const int lane = int(threadIdx.x % 32);
  q[lane] = int8_t(qi);
  if (lane == 0) *ds = make_float2(s.d, s.d * float(sum));
}

// The 6-bit (scale, min) of sub-blocks 2p and 2p+1 of a Q4_K/Q5_K super-block,
// from its 12 scale bytes as words s0 (bytes 0..3), s1 (4..7), s2 (8..11).
// Sub-block j < 4: scale = byte j & 63, min = byte j+4 & 63; j ≥ 4: the low
// 4 bits come from byte j+4 (scale: low nibble, min: high nibble) and the top
// 2 from bits 6..7 of byte j−4 (scale) or j (min). Both sub-blocks of a pair
// sit in adjacent bytes, so each is one masked 16-bit slice.
struct ScaleMinPair {
  int sc0, sc1, mn0, mn1;
};
__device__ __forceinline__ ScaleMinPair k_scale_min_pair(uint32_t s0, uint32_t s1, uint32_t s2, int p) {
  const uint32_t shift = 16u * uint32_t(p & 1);
  const uint32_t a = s0 >> shift, b = s1 >> shift, c = s2 >> shift;
  uint32_t sc, mn;
  if (p < 2) {
    sc = a & 0x3F3Fu;
    mn = b & 0x3F3Fu;
  } else {
    sc = (c & 0x0F0Fu) | ((a >> 2) & 0x3030u);  // (b >> 6) << 4 per byte = (b >> 2) & 0x30
    mn = ((c >> 4) & 0x0F0Fu) | ((b >> 2) & 0x3030u);
  }
  return {int(sc & 0xFF), int(sc >> 8), int(mn & 0xFF), int(mn >> 8)};
}

// MLX affine q as the signed bytes __dp4a takes, in x's order (core/dtype.h:
// w = scale·q + bias, q packed little-end first).
// 8-bit q (0..255) is taken as q − 128, a signed byte (the top bit flipped),
// so Σ w·x = scale·dx·Σ (q − 128)·xq + (128·scale + bias)·sx.
__device__ __forceinline__ int affine8_centered(uint32_t w) { return int(w ^ 0x80808080u); }
// A 4-bit word holds elements 8j..8j+7, element 2i + h in byte i's low (h = 0)
// or high nibble: the masked nibbles are the even and the odd elements,
// interleaved back into order by two byte permutes (first: 8j..8j+3).
struct AffineNibbles {
  int first, second;
};
__device__ __forceinline__ AffineNibbles affine4_in_order(uint32_t w) {
  const uint32_t even = w & 0x0F0F0F0Fu, odd = (w >> 4) & 0x0F0F0F0Fu;
  return {int(__byte_perm(even, odd, 0x5140)), int(__byte_perm(even, odd, 0x7362))};
}
// The weight of a block's sx in Σ w·x: the bias, plus 128·scale for the
// 8-bit q taken as q − 128.
template <int kBits>
__device__ __forceinline__ float affine_offset(float scale, float bias) {
  return kBits == 8 ? fmaf(128.0f, scale, bias) : bias;
}

// c + Σ of the 4 unsigned bytes of a times the 4 signed bytes of b
// (dp4a.u32.s32). A 4-bit type's high nibbles masked in place (w &
// 0xF0F0F0F0) are 16·q as unsigned bytes, so Σ 16·q·x >> 4 is Σ q·x
// exactly, without the shift per word that moving them down costs.
__device__ __forceinline__ int dp4a_unsigned_signed(uint32_t a, int b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Σ of 16 int8 products: w[0..3] against the 16 bytes of x.
__device__ __forceinline__ int dot16(const int w[4], int4 x, int acc) {
  acc = __dp4a(w[0], x.x, acc);
  acc = __dp4a(w[1], x.y, acc);
  acc = __dp4a(w[2], x.z, acc);
  return __dp4a(w[3], x.w, acc);
}

// Two words starting at the 2-byte-aligned address p, from aligned loads: the
// third word is read only when p is not 4-byte aligned, so no byte past
// p + 8 is touched.
__device__ __forceinline__ void load_u32x2_a2(const uint8_t* p, uint32_t out[2]) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  const uint8_t* base = p - (addr & 3);
  const uint32_t shift = uint32_t(addr & 3) * 8;  // 0 or 16
  const uint32_t w0 = load_weight_u32(base), w1 = load_weight_u32(base + 4);
  const uint32_t w2 = shift != 0 ? load_weight_u32(base + 8) : 0u;
  out[0] = __funnelshift_r(w0, w1, shift);
  out[1] = __funnelshift_r(w1, w2, shift);
}

template <DType T>
struct Dot;

// A lane's share of an x row's 32-value block c: its int8 values and (dx, sx).
struct Block32Acts {
  int4 lo, hi;
  float2 ds;
};
__device__ __forceinline__ Block32Acts load_block32_acts(const Int8Acts& x, int r, int64_t c) {
  const int8_t* xq = x.q + r * x.k + c * 32;
  return {ldg_x16(xq), ldg_x16(xq + 16), __ldg(x.ds + r * x.n_blocks + c)};
}

// The lane of the 32-value block types: block c = lane, lane + 32, ...
struct BlockLane {
  int first;
  __device__ explicit BlockLane(int lane) : first(lane) {}
};

// acc0[r] += lane's share of w[0] · x_r (and acc1[r] of w[1] · x_r when
// kW = 2) for each x row r < n. Each step decodes the weight shares first,
// then reads an x row's share once for both.
template <DType T, int R, int kW>
__device__ __forceinline__ void dot_rows(const uint8_t* const (&w)[kW], const Int8Acts& x, int n, int lane,
                                         float (&acc0)[R], float (&acc1)[R]) {
  static_assert(kW == 1 || kW == 2);
  using D = Dot<T>;
  const typename D::Lane l(lane);
  const int64_t steps = D::steps(x);
  // Two steps in flight; one when two weight rows and several x rows
  // already hold more than 100 registers a lane.
  constexpr int kUnroll = kW == 2 && R > 1 ? 1 : 2;
#pragma unroll(kUnroll)
  for (int64_t s = l.first; s < steps; s += D::kStride) {
    typename D::Share ws[kW];
#pragma unroll
    for (int j = 0; j < kW; ++j) ws[j] = D::load(w[j], s, l);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < n) {
        const typename D::XShare xs = D::load_x(x, r, s, l);
        acc0[r] += D::term(ws[0], xs);
        if constexpr (kW == 2) acc1[r] += D::term(ws[1], xs);
      }
    }
  }
}

// Whether a plain launch's warps walk rows 2j and 2j + 1 together, reading x
// once for both: for the types and x row bounds where x loads are most of a
// step's load instructions (Dot<T>::pair_rows(kMaxRows)). Measured on
// Llama-3-8B decode: Q4_K 461 → 475 tokens/s at 1 row, 759 → 977 at 4, 895
// → 1,081 at 8; Q5_K 393 → 400, 733 → 927, 916 → 1,039. Q4_0 (5 weight loads
// a step against x's 3) lost at 1 and 8 rows (496 → 493, 1,344 → 1,249),
// Q8_0 (3 chunk loads) too (358 → 343, 1,242 → 1,116).
template <DType T, int kMaxRows, bool kSwiglu>
inline constexpr bool kInt8PairRows = !kSwiglu && Dot<T>::pair_rows(kMaxRows);

// What the warps walk: weight rows, or pairs of rows (an odd last row is
// walked twice and stored once).
template <DType T, int kMaxRows, bool kSwiglu>
__host__ __device__ int64_t int8_warp_rows(int64_t m) {
  return kInt8PairRows<T, kMaxRows, kSwiglu> ? (m + 1) / 2 : m;
}

// A warp walks one weight row, SwiGLU's gate and up row j together, or a
// pair of rows (kInt8PairRows).
template <DType T, int kMaxRows, bool kSwiglu>
__global__ void __launch_bounds__(kInt8Warps * 32) gemv_int8_kernel(GemvArgs a, Int8Acts x) {
  constexpr bool kPairs = kInt8PairRows<T, kMaxRows, kSwiglu>;
  const int lane = threadIdx.x % 32;
  const int64_t n_warps = int64_t(gridDim.x) * kInt8Warps;
  const int64_t first = int64_t(blockIdx.x) * kInt8Warps + threadIdx.x / 32;
  const int64_t work = int8_warp_rows<T, kMaxRows, kSwiglu>(a.m);
  gemv_prologue(a, kPairs ? 2 * first : first, kPairs ? 2 : 1, lane);
  for (int64_t j = first; j < work; j += n_warps) {
    const int64_t row0 = kPairs ? 2 * j : j, row1 = kPairs ? std::min(2 * j + 1, a.m - 1) : j;
    const GemvTarget t0 = gemv_target(a, row0);
    float acc0[kMaxRows], acc1[kMaxRows];
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) acc0[r] = acc1[r] = 0.0f;
    if constexpr (kSwiglu) {
      dot_rows<T, kMaxRows, 2>({t0.w, t0.w_up}, x, a.n, lane, acc0, acc1);
      gemv_reduce_store<true, kMaxRows>(a, t0, lane, acc0, acc1);
    } else if constexpr (kPairs) {
      const GemvTarget t1 = gemv_target(a, row1);
      dot_rows<T, kMaxRows, 2>({t0.w, t1.w}, x, a.n, lane, acc0, acc1);
      gemv_reduce_store<false, kMaxRows>(a, t0, lane, acc0, acc0);
      if (row1 != row0) gemv_reduce_store<false, kMaxRows>(a, t1, lane, acc1, acc1);
    } else {
      dot_rows<T, kMaxRows, 1>({t0.w}, x, a.n, lane, acc0, acc1);
      gemv_reduce_store<false, kMaxRows>(a, t0, lane, acc0, acc0);
    }
  }
}

// CTAs for one resident wave of this kernel. With m rows over `rounds` =
// ceil(m / resident warps) passes, the grid is cut to ceil(m / rounds) warps
// so every warp walks the same number of rows: a full wave would leave a last
// pass with only a few warps streaming (gate/up at 14,336 rows: 3.02 passes,
// the 4th with 80 warps out of ~4,700).
template <DType T, int kMaxRows, bool kSwiglu>
unsigned int8_grid(int64_t m) {
  static const int64_t resident = [] {
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_int8_kernel<T, kMaxRows, kSwiglu>,
                                                             kInt8Warps * 32, 0));
    return int64_t(std::max(per_sm, 1)) * multiprocessor_count();
  }();
  const int64_t capacity = resident * kInt8Warps;  // warps
  const int64_t rounds = (m + capacity - 1) / capacity;
  const int64_t warps = (m + rounds - 1) / rounds;
  return unsigned((warps + kInt8Warps - 1) / kInt8Warps);
}

template <DType T, int kMaxRows, bool kSwiglu>
void launch_int8_rows(const GemvArgs& a, const Int8Acts& x) {
  launch_dependent(gemv_int8_kernel<T, kMaxRows, kSwiglu>,
                   int8_grid<T, kMaxRows, kSwiglu>(int8_warp_rows<T, kMaxRows, kSwiglu>(a.m)), kInt8Warps * 32, 0, a,
                   x);
}

// Row bound 1, 4 or 8 (runtime n below it), plain or SwiGLU.
template <DType T>
void launch_int8(const GemvArgs& a, const Int8Acts& x) {
  const bool swiglu = a.w_up != nullptr;
  if (a.n == 1) {
    swiglu ? launch_int8_rows<T, 1, true>(a, x) : launch_int8_rows<T, 1, false>(a, x);
  } else if (a.n <= 4) {
    swiglu ? launch_int8_rows<T, 4, true>(a, x) : launch_int8_rows<T, 4, false>(a, x);
  } else {
    swiglu ? launch_int8_rows<T, 8, true>(a, x) : launch_int8_rows<T, 8, false>(a, x);
  }
}
#endif

// Launchers per family (one .cu each, compiled in parallel).
void gemv_int8_blocks32(DType wtype, const GemvArgs& args, const Int8Acts& x);  // Q8_0, Q4_0, Q4_1
void gemv_int8_kquants(DType wtype, const GemvArgs& args, const Int8Acts& x);   // Q4_K, Q5_K, Q6_K
void gemv_int8_affine(DType wtype, const GemvArgs& args, const Int8Acts& x);    // MLX affine 4/8-bit

}  // namespace brioche::cuda::detail
