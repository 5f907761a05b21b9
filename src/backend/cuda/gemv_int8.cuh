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
// Work split: one warp per weight row, or `split` warps (2 or 4) per row
// when a launch has too few rows to fill the GPU (int8_split); the grid
// strides over rows and is sized to whole resident waves. Lanes take
// consecutive pieces of the row, so each weight byte is read once,
// coalesced; the warps of a split row take every split-th warp step. Every weight piece is unpacked to
// int8 lanes with a few bit operations, then reused for all n ≤ 8 x rows.
// Each dtype has a Dot<T> that says how a lane walks a row (Lane: its first
// step; kStride, steps), what it decodes of one weight row at a step (load →
// Share), what it reads of one x row there (load_x → XShare) and their
// product (term), and whether a plain launch's warps take rows in pairs
// (pair_rows). dot_rows below walks one or two weight rows (SwiGLU's gate and
// up, or a pair of rows) with it, reading each x share once for both, and the
// warp sums the lanes. The per-row order of operations does not depend on the launch
// (grid, parts, fusion), so fused and unfused launches give bit-identical
// outputs.
#pragma once

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/runtime.h"

namespace brioche::cuda::detail {

struct Int8Acts {
  const int8_t* q;   // [n, k] int8 values, row stride k
  const float2* ds;  // [n, k/32] (dx, sx) per 32-value block
  int64_t k;
  int64_t n_blocks;  // k / 32
};

inline constexpr int kInt8Warps = 4;  // weight rows in flight per CTA

#ifdef __CUDACC__
__device__ __forceinline__ float half_lo(uint32_t w) { return __half2float(__ushort_as_half(uint16_t(w))); }
__device__ __forceinline__ float half_hi(uint32_t w) {
  return __half2float(__ushort_as_half(uint16_t(w >> 16)));
}
__device__ __forceinline__ uint32_t ldg_u32(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned int*>(p));
}
__device__ __forceinline__ uint4 ldg_u128(const uint8_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ int4 ldg_x16(const int8_t* p) { return __ldg(reinterpret_cast<const int4*>(p)); }
__device__ __forceinline__ int2 ldg_x8(const int8_t* p) { return __ldg(reinterpret_cast<const int2*>(p)); }
__device__ __forceinline__ float4 ldg_ds2(const float2* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

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
  const uint32_t w0 = ldg_u32(base), w1 = ldg_u32(base + 4);
  const uint32_t w2 = shift != 0 ? ldg_u32(base + 8) : 0u;
  out[0] = __funnelshift_r(w0, w1, shift);
  out[1] = __funnelshift_r(w1, w2, shift);
}

template <DType T>
struct Dot;

// bar.sync for the kThreads threads (whole warps) of group `group` < 2 of a
// CTA, on barrier 1 + group. The ids are immediates: with a register id
// ptxas reserves all 16 barriers for the CTA, and barriers then limit an SM
// to 4 CTAs (16 warps) of the GEMV.
template <int kThreads>
__device__ __forceinline__ void group_barrier(int group) {
  if (group == 0) asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
  else asm volatile("bar.sync 2, %0;" ::"n"(kThreads) : "memory");
}

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

// Warp steps a loop keeps in flight: two; one when two weight rows and
// several x rows already hold more than 100 registers a lane.
__host__ __device__ constexpr int int8_steps_in_flight(int weight_rows, int max_x_rows) {
  return weight_rows == 2 && max_x_rows > 1 ? 1 : 2;
}

// acc0[r] += lane's share of w[0] · x_r (and acc1[r] of w[1] · x_r when
// kW = 2) for each x row r < n, over the warp steps slice, slice + split,
// ... of the row. Each step decodes the weight shares first, then reads an x
// row's share once for both.
template <DType T, int R, int kW>
__device__ __forceinline__ void dot_rows(const uint8_t* const (&w)[kW], const Int8Acts& x, int n, int lane,
                                         int slice, int split, float (&acc0)[R], float (&acc1)[R]) {
  static_assert(kW == 1 || kW == 2);
  using D = Dot<T>;
  const typename D::Lane l(lane);
  const int steps = int(D::steps(x)), stride = D::kStride * split;
#pragma unroll(int8_steps_in_flight(kW, R))
  for (int s = l.first + slice * D::kStride; s < steps; s += stride) {
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

// Warp steps of one weight row (D::steps counts units of kStepValues values,
// a warp step takes kStride of them).
template <DType T>
int64_t int8_row_warp_steps(int64_t k) {
  constexpr int64_t kValues = Dot<T>::kStepValues * Dot<T>::kStride;
  return (k + kValues - 1) / kValues;
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

// Sums each of a warp's per-lane partials over its lanes (every lane gets
// the sums; the order is that of gemv_reduce_store).
template <int R>
__device__ __forceinline__ void warp_sum_rows(float (&acc)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
}

// A group of kSplit warps walks one weight row, SwiGLU's gate and up row j
// together, or a pair of rows (kInt8PairRows). With kSplit > 1 each warp
// sums its slices over its lanes, and the group's first warp adds the warps'
// sums in slice order (through shared memory) and stores. (A runtime split
// kept more registers live through the dot loop: Q4_0 32 → 40.)
template <DType T, int kMaxRows, bool kSwiglu, int kSplit>
__global__ void __launch_bounds__(kInt8Warps * 32) gemv_int8_kernel(GemvArgs a, Int8Acts x) {
  constexpr bool kPairs = kInt8PairRows<T, kMaxRows, kSwiglu>;
  constexpr int kGroups = kInt8Warps / kSplit;  // per CTA
  static_assert(kSplit == 1 || kGroups <= 2, "group_barrier has two barriers");
  __shared__ float partial[kInt8Warps][2][kMaxRows];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int slice = warp % kSplit, group = warp / kSplit;
  // Rows fit in 32 bits (m < 2^31); 64-bit row counters cost registers.
  const int n_groups = int(gridDim.x) * kGroups, first = int(blockIdx.x) * kGroups + group;
  const int work = int(int8_warp_rows<T, kMaxRows, kSwiglu>(a.m)), last_row = int(a.m) - 1;
  gemv_prologue(a, kPairs ? 2 * first : first, slice == 0 ? (kPairs ? 2 : 1) : 0, lane);
  for (int j = first; j < work; j += n_groups) {
    const int row0 = kPairs ? 2 * j : j, row1 = kPairs ? min(2 * j + 1, last_row) : j;
    const GemvTarget t0 = gemv_target(a, row0);
    const GemvTarget t1 = kPairs ? gemv_target(a, row1) : t0;
    float acc0[kMaxRows], acc1[kMaxRows];
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) acc0[r] = acc1[r] = 0.0f;
    if constexpr (kSwiglu || kPairs)
      dot_rows<T, kMaxRows, 2>({t0.w, kSwiglu ? t0.w_up : t1.w}, x, a.n, lane, slice, kSplit, acc0, acc1);
    else dot_rows<T, kMaxRows, 1>({t0.w}, x, a.n, lane, slice, kSplit, acc0, acc1);
    warp_sum_rows(acc0);
    if constexpr (kSwiglu || kPairs) warp_sum_rows(acc1);
    if constexpr (kSplit > 1) {
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) partial[warp][0][r] = acc0[r], partial[warp][1][r] = acc1[r];
      group_barrier<kSplit * 32>(group);
      if (slice == 0) {
#pragma unroll
        for (int i = 1; i < kSplit; ++i)
#pragma unroll
          for (int r = 0; r < kMaxRows; ++r) acc0[r] += partial[warp + i][0][r], acc1[r] += partial[warp + i][1][r];
      }
      group_barrier<kSplit * 32>(group);  // read before the next row's partials are written
      if (slice != 0) continue;
    }
    if (lane != 0) continue;
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r >= a.n) break;
      if constexpr (kSwiglu) {
        gemv_store<true>(a, t0, r, acc0[r], acc1[r]);
      } else {
        gemv_store<false>(a, t0, r, acc0[r], 0.0f);
        if (kPairs && row1 != row0) gemv_store<false>(a, t1, r, acc1[r], 0.0f);
      }
    }
  }
}

// Resident warps of one instantiation on the whole GPU.
template <DType T, int kMaxRows, bool kSwiglu, int kSplit>
int64_t int8_resident_warps() {
  static const int64_t resident = [] {
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, gemv_int8_kernel<T, kMaxRows, kSwiglu, kSplit>, kInt8Warps * 32, 0));
    return int64_t(std::max(per_sm, 1)) * multiprocessor_count() * kInt8Warps;
  }();
  return resident;
}

// Passes of the grid over the launch's `items` warp groups: whole resident
// waves, ceil(items / resident groups).
template <DType T, int kMaxRows, bool kSwiglu, int kSplit>
int64_t int8_rounds(int64_t items) {
  const int64_t capacity = int8_resident_warps<T, kMaxRows, kSwiglu, kSplit>() / kSplit;  // groups
  return (items + capacity - 1) / capacity;
}

// The grid is cut to ceil(items / rounds) groups so every group walks the
// same number of rows: a full wave would leave a last pass with only a few
// warps streaming (gate/up at 14,336 rows: 3.02 passes, the 4th with 80 warps
// out of ~4,700).
template <DType T, int kMaxRows, bool kSwiglu, int kSplit>
void launch_int8_split(const GemvArgs& a, const Int8Acts& x, int64_t items) {
  const int64_t rounds = int8_rounds<T, kMaxRows, kSwiglu, kSplit>(items);
  const int64_t groups = (items + rounds - 1) / rounds, per_cta = kInt8Warps / kSplit;
  launch_dependent(gemv_int8_kernel<T, kMaxRows, kSwiglu, kSplit>, unsigned((groups + per_cta - 1) / per_cta),
                   kInt8Warps * 32, 0, a, x);
}

// Warps per row. A warp waits out one memory latency per two warp steps (the
// loop keeps two in flight, int8_steps_in_flight) and per row, so a launch
// costs about rounds × ceil(steps / (2 · split)) latencies; the split with
// the fewest wins, ties
// going to fewer warps. Llama-3-8B's down_proj in Q4_0 (4,096 rows of 14 warp
// steps, one round) takes 7 latencies at split 1 and 2·2 = 4 at split 4;
// gate/up (14,336 rows of 4 steps, 3 rounds) stays at split 1 (6 against 6
// at split 2, 11 at split 4). BRIOCHE_CUDA_INT8_SPLIT=1|2|4 fixes it.
int int8_split_override();
template <DType T, int kMaxRows, bool kSwiglu>
void launch_int8_rows(const GemvArgs& a, const Int8Acts& x) {
  const int64_t items = int8_warp_rows<T, kMaxRows, kSwiglu>(a.m), steps = int8_row_warp_steps<T>(a.k);
  int split = int8_split_override();
  if (split == 0) {
    constexpr int kInFlight = int8_steps_in_flight(kSwiglu || kInt8PairRows<T, kMaxRows, kSwiglu> ? 2 : 1, kMaxRows);
    auto latencies = [&](int64_t rounds, int64_t split) {
      return rounds * ((steps + kInFlight * split - 1) / (kInFlight * split));
    };
    const int64_t l1 = latencies(int8_rounds<T, kMaxRows, kSwiglu, 1>(items), 1);
    const int64_t l2 = latencies(int8_rounds<T, kMaxRows, kSwiglu, 2>(items), 2);
    const int64_t l4 = latencies(int8_rounds<T, kMaxRows, kSwiglu, 4>(items), 4);
    split = l4 < std::min(l1, l2) ? 4 : l2 < l1 ? 2 : 1;
  }
  if (split == 4) launch_int8_split<T, kMaxRows, kSwiglu, 4>(a, x, items);
  else if (split == 2) launch_int8_split<T, kMaxRows, kSwiglu, 2>(a, x, items);
  else launch_int8_split<T, kMaxRows, kSwiglu, 1>(a, x, items);
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

}  // namespace brioche::cuda::detail
