// Integer GEMV (gemv_int8.cuh) for the 256-value K-quant super-blocks:
// Q4_K and Q5_K (4 lanes per super-block, 64 values each: a warp step covers
// 8 super-blocks) and Q6_K (8 lanes, 32 values each: 4 super-blocks).
#include "backend/cuda/gemv_int8.cuh"

namespace brioche::cuda::detail {

namespace {

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
    sc = (c & 0x0F0Fu) | ((a >> 2) & 0x3030u);         // (b >> 6) << 4 per byte = (b >> 2) & 0x30
    mn = ((c >> 4) & 0x0F0Fu) | ((b >> 2) & 0x3030u);
  }
  return {int(sc & 0xFF), int(sc >> 8), int(mn & 0xFF), int(mn >> 8)};
}

// Which part of a super-block a lane takes in the 4-bit/5-bit types.
// Sub-blocks 2p and 2p+1 share the 32 bytes qs[32p..32p+32) (low nibbles are
// sub-block 2p, high nibbles 2p+1). With kLanes = 8 lanes per super-block a
// lane takes pair p = (lane >> 1) & 3 and half h = lane & 1 (elements
// 16h..16h+16 of both sub-blocks); with kLanes = 4 it takes both halves of
// pair p = lane & 3, so the scale decode and the float epilogue serve 64
// values. The lane holding half 0 adds the min terms (they use the whole x
// block's sum).
template <int kLanes>
struct KSplit {
  static_assert(kLanes == 4 || kLanes == 8);
  static constexpr int kSupersPerStep = 32 / kLanes;
  static constexpr int kHalves = 8 / kLanes;
  int sub, p, h0;
  __device__ explicit KSplit(int lane)
      : sub(lane / kLanes), p(kLanes == 8 ? (lane >> 1) & 3 : lane & 3), h0(kLanes == 8 ? lane & 1 : 0) {}
};

// Scales of a lane's two sub-blocks (2p, 2p + 1) of a Q4_K/Q5_K super-block.
struct PairScales {
  float dl0, dl1;  // d · sc of each
  float ml0, ml1;  // dmin · mn of each (0 on the lane that does not add the mins)
};

// acc[r] += Σ over the pair of (d·sc·dx·Σq·xq − dmin·mn·sx) for each x row:
// lo/hi hold this lane's int8 quants of sub-blocks 2p and 2p + 1, starting at
// value 16·h0 of each; xb is x's block of sub-block 2p.
template <int R, int kHalves>
__device__ __forceinline__ void add_sub_block_pair(const Int8Acts& x, int n, int64_t xb, int h0,
                                                   const int (&lo)[kHalves][4], const int (&hi)[kHalves][4],
                                                   const PairScales& sc, float acc[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r < n) {
      const int8_t* xq = x.q + r * x.k + xb * 32 + 16 * h0;
      int dot0 = 0, dot1 = 0;
#pragma unroll
      for (int hh = 0; hh < kHalves; ++hh) {
        dot0 = dot16(lo[hh], ldg_x16(xq + 16 * hh), dot0);
        dot1 = dot16(hi[hh], ldg_x16(xq + 32 + 16 * hh), dot1);
      }
      const float4 ds = ldg_ds2(x.ds + r * x.n_blocks + xb);
      acc[r] += sc.dl0 * ds.x * float(dot0) + sc.dl1 * ds.z * float(dot1) - sc.ml0 * ds.y - sc.ml1 * ds.w;
    }
  }
}

}  // namespace

// Q4_K: f16 d, dmin; scales[12]; qs[128]. w = d·sc_j·q − dmin·mn_j, so per
// sub-block Σ w·x = d·sc_j·dx·Σq·xq − dmin·mn_j·sx. 4 lanes per super-block:
// Llama-3-8B decode ran 365 tok/s against 340 with 8 lanes (and 343 with 8
// lanes and 4 steps unrolled) on the H200.
template <>
struct Dot<DType::Q4_K> {
  using Split = KSplit<4>;
  static constexpr int kUnroll = 2;  // super-block steps in flight per lane
  template <int R>
  __device__ static void row(const uint8_t* w, const Int8Acts& x, int n, int lane, float acc[R]) {
    constexpr int kHalves = Split::kHalves;
    const Split l(lane);
    const int64_t n_super = x.k / 256;
#pragma unroll(kUnroll)
    for (int64_t s = l.sub; s < n_super; s += Split::kSupersPerStep) {
      const uint8_t* b = w + s * 144;
      const uint4 head = ldg_u128(b);  // d, dmin, scales[12]
      uint4 qv[kHalves];
#pragma unroll
      for (int hh = 0; hh < kHalves; ++hh) qv[hh] = ldg_u128(b + 16 + 32 * l.p + 16 * (l.h0 + hh));
      const ScaleMinPair sm = k_scale_min_pair(head.y, head.z, head.w, l.p);
      const float d = half_lo(head.x), dmin = l.h0 == 0 ? half_hi(head.x) : 0.0f;
      const float dl0 = d * float(sm.sc0), dl1 = d * float(sm.sc1);
      const float ml0 = dmin * float(sm.mn0), ml1 = dmin * float(sm.mn1);
      int lo[kHalves][4], hi[kHalves][4];
#pragma unroll
      for (int hh = 0; hh < kHalves; ++hh) {
        const uint32_t words[4] = {qv[hh].x, qv[hh].y, qv[hh].z, qv[hh].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          lo[hh][i] = int(words[i] & 0x0F0F0F0Fu);
          hi[hh][i] = int((words[i] >> 4) & 0x0F0F0F0Fu);
        }
      }
      const int64_t xb = s * 8 + 2 * l.p;  // x block of sub-block 2p
      add_sub_block_pair<R, kHalves>(x, n, xb, l.h0, lo, hi, {dl0, dl1, ml0, ml1}, acc);
    }
  }
};

// Q5_K: f16 d, dmin; scales[12]; qh[32]; qs[128]. As Q4_K, plus a fifth bit:
// bit j of qh[i] for element i of sub-block j.
template <>
struct Dot<DType::Q5_K> {
  using Split = KSplit<4>;
  static constexpr int kUnroll = 2;  // super-block steps in flight per lane
  template <int R>
  __device__ static void row(const uint8_t* w, const Int8Acts& x, int n, int lane, float acc[R]) {
    constexpr int kHalves = Split::kHalves;
    const Split l(lane);
    const int64_t n_super = x.k / 256;
    const int j0 = 2 * l.p, j1 = 2 * l.p + 1;
#pragma unroll(kUnroll)
    for (int64_t s = l.sub; s < n_super; s += Split::kSupersPerStep) {
      const uint8_t* b = w + s * 176;
      const uint4 head = ldg_u128(b);
      uint4 hv[kHalves], qv[kHalves];
#pragma unroll
      for (int hh = 0; hh < kHalves; ++hh) {
        hv[hh] = ldg_u128(b + 16 + 16 * (l.h0 + hh));
        qv[hh] = ldg_u128(b + 48 + 32 * l.p + 16 * (l.h0 + hh));
      }
      const ScaleMinPair sm = k_scale_min_pair(head.y, head.z, head.w, l.p);
      const float d = half_lo(head.x), dmin = l.h0 == 0 ? half_hi(head.x) : 0.0f;
      const float dl0 = d * float(sm.sc0), dl1 = d * float(sm.sc1);
      const float ml0 = dmin * float(sm.mn0), ml1 = dmin * float(sm.mn1);
      int lo[kHalves][4], hi[kHalves][4];
#pragma unroll
      for (int hh = 0; hh < kHalves; ++hh) {
        const uint32_t words[4] = {qv[hh].x, qv[hh].y, qv[hh].z, qv[hh].w};
        const uint32_t high[4] = {hv[hh].x, hv[hh].y, hv[hh].z, hv[hh].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          lo[hh][i] = int((words[i] & 0x0F0F0F0Fu) | (((high[i] >> j0) & 0x01010101u) << 4));
          hi[hh][i] = int(((words[i] >> 4) & 0x0F0F0F0Fu) | (((high[i] >> j1) & 0x01010101u) << 4));
        }
      }
      const int64_t xb = s * 8 + j0;
      add_sub_block_pair<R, kHalves>(x, n, xb, l.h0, lo, hi, {dl0, dl1, ml0, ml1}, acc);
    }
  }
};

// Q6_K: ql[128]; qh[64]; int8 scales[16]; f16 d (210 bytes, 2-byte aligned).
// Half hh of the super-block (128 values) is 4 sub-blocks t = 0..3 of 32:
// element i of sub-block t has its low 4 bits in ql[64hh + 32(t&1) + i]
// (nibble t>>1) and its top 2 in qh[32hh + i] (bits 2t..2t+1); scale
// sc[8hh + 2t + i/16]; w = d·sc·(q − 32). Lane: super-block (lane >> 3), half
// hh = (lane >> 2) & 1, elements i in [8g, 8g+8) with g = lane & 3, for all
// four t (one 16-value scale group each).
// (4 steps unrolled instead of 2 measured no faster.)
template <>
struct Dot<DType::Q6_K> {
  static constexpr int kUnroll = 2;
  template <int R>
  __device__ static void row(const uint8_t* w, const Int8Acts& x, int n, int lane, float acc[R]) {
    const int sub = lane >> 3, hh = (lane >> 2) & 1, g = lane & 3;
    const int64_t n_super = x.k / 256;
#pragma unroll(kUnroll)
    for (int64_t s = sub; s < n_super; s += 4) {
      const uint8_t* b = w + s * 210;
      uint32_t la[2], lb[2], qh[2], sc[2];
      load_u32x2_a2(b + 64 * hh + 8 * g, la);       // t = 0 (low nibbles), t = 2 (high)
      load_u32x2_a2(b + 64 * hh + 32 + 8 * g, lb);  // t = 1, t = 3
      load_u32x2_a2(b + 128 + 32 * hh + 8 * g, qh);
      load_u32x2_a2(b + 192 + 8 * hh, sc);          // sc[8hh .. 8hh+8)
      const float d = __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(b + 208))));
      // Scale of sub-block t for this lane's 8 elements: byte 2t + (g >> 1).
      const uint32_t sc_shift = 8u * uint32_t(g >> 1);
      int scale[4];
      scale[0] = int(int8_t(sc[0] >> sc_shift));
      scale[1] = int(int8_t(sc[0] >> (sc_shift + 16)));
      scale[2] = int(int8_t(sc[1] >> sc_shift));
      scale[3] = int(int8_t(sc[1] >> (sc_shift + 16)));
      int q[4][2];  // [t][word]: signed q − 32 in each byte
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint32_t low[4] = {la[i] & 0x0F0F0F0Fu, lb[i] & 0x0F0F0F0Fu, (la[i] >> 4) & 0x0F0F0F0Fu,
                                 (lb[i] >> 4) & 0x0F0F0F0Fu};
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const uint32_t v = low[t] | (((qh[i] >> (2 * t)) & 0x03030303u) << 4);
          q[t][i] = int(__vsub4(v, 0x20202020u));
        }
      }
      const int64_t xb = s * 8 + 4 * hh;  // x block of sub-block t = 0
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < n) {
          const int8_t* xq = x.q + r * x.k + xb * 32 + 8 * g;
          const float2* ds = x.ds + r * x.n_blocks + xb;
          float sum = 0.0f;
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            const int2 xv = ldg_x8(xq + 32 * t);
            const int dot = __dp4a(q[t][1], xv.y, __dp4a(q[t][0], xv.x, 0));
            sum += __ldg(&ds[t].x) * float(scale[t] * dot);
          }
          acc[r] += d * sum;
        }
      }
    }
  }
};

void gemv_int8_kquants(DType wtype, const GemvArgs& a, const Int8Acts& x) {
  switch (wtype) {
    case DType::Q4_K: return launch_int8<DType::Q4_K>(a, x);
    case DType::Q5_K: return launch_int8<DType::Q5_K>(a, x);
    case DType::Q6_K: return launch_int8<DType::Q6_K>(a, x);
    default: fail("gemv_int8_kquants: ", dtype_name(wtype), " is not a K-quant type");
  }
}

}  // namespace brioche::cuda::detail
