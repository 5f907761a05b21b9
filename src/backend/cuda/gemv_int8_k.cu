// Integer GEMV (gemv_int8.cuh) for the 256-value K-quant super-blocks:
// Q4_K and Q5_K (4 lanes per super-block, 64 values each: a warp step covers
// 8 super-blocks) and Q6_K (8 lanes, 32 values each: 4 super-blocks).
#include "backend/cuda/gemv_int8.cuh"

namespace brioche::cuda::detail {

namespace {

// Which part of a super-block a lane takes in the 4-bit/5-bit types: 4 lanes
// per super-block, lane p = lane & 3 taking sub-blocks 2p and 2p + 1, which
// share the 32 bytes qs[32p..32p+32) (low nibbles are sub-block 2p, high
// nibbles 2p + 1), read as two 16-byte halves. So the scale decode and the
// float epilogue serve 64 values. `first` is the lane's first super-block.
struct KPairLane {
  static constexpr int kSupersPerStep = 8;  // super-blocks a warp step covers
  int first, p;
  __device__ explicit KPairLane(int lane) : first(lane / 4), p(lane & 3) {}
};

}  // namespace

// What Q4_K and Q5_K share: 4 lanes per super-block (Llama-3-8B decode ran
// 365 tok/s against 340 with 8 lanes, each taking half a pair, and 343 with 8
// lanes and 4 steps unrolled, on the H200); a lane's share of a weight row is
// the int8 quants of sub-blocks 2p and 2p + 1 with their scales, and its
// share of x the matching values of x blocks 8s + 2p and 8s + 2p + 1. Per
// sub-block Σ w·x = d·sc_j·dx·Σq·xq − dmin·mn_j·sx.
struct KPairDot {
  using Lane = KPairLane;
  static constexpr int kHalves = 2;  // 16-byte halves of the pair's quants
  static constexpr int kStride = Lane::kSupersPerStep;
  static constexpr bool pair_rows(int) { return true; }  // x: 5 of a step's 8 loads (gemv_int8.cuh)
  struct Share {
    int lo[kHalves][4], hi[kHalves][4];
    float dl0, dl1;  // d · sc of each sub-block
    float ml0, ml1;  // dmin · mn of each
  };
  struct XShare {
    int4 lo[kHalves], hi[kHalves];
    float4 ds;  // (dx, sx) of both x blocks
  };
  __device__ static int64_t steps(const Int8Acts& x) { return x.k / 256; }
  // The scales of super-block `head` (d, dmin, scales[12]) for the lane's pair.
  __device__ static void set_scales(uint4 head, const Lane& l, Share& b) {
    const ScaleMinPair sm = k_scale_min_pair(head.y, head.z, head.w, l.p);
    const float d = half_lo(head.x), dmin = half_hi(head.x);
    b.dl0 = d * float(sm.sc0);
    b.dl1 = d * float(sm.sc1);
    b.ml0 = dmin * float(sm.mn0);
    b.ml1 = dmin * float(sm.mn1);
  }
  __device__ static XShare load_x(const Int8Acts& x, int r, int64_t s, const Lane& l) {
    const int64_t xb = s * 8 + 2 * l.p;  // x block of sub-block 2p
    const int8_t* xq = x.q + r * x.k + xb * 32;
    XShare v;
#pragma unroll
    for (int hh = 0; hh < kHalves; ++hh) {
      v.lo[hh] = ldg_x16(xq + 16 * hh);
      v.hi[hh] = ldg_x16(xq + 32 + 16 * hh);
    }
    v.ds = ldg_ds2(x.ds + r * x.n_blocks + xb);
    return v;
  }
  __device__ static float term(const Share& b, const XShare& x) {
    int dot0 = 0, dot1 = 0;
#pragma unroll
    for (int hh = 0; hh < kHalves; ++hh) {
      dot0 = dot16(b.lo[hh], x.lo[hh], dot0);
      dot1 = dot16(b.hi[hh], x.hi[hh], dot1);
    }
    return b.dl0 * x.ds.x * float(dot0) + b.dl1 * x.ds.z * float(dot1) - b.ml0 * x.ds.y - b.ml1 * x.ds.w;
  }
};

// Q4_K: f16 d, dmin; scales[12]; qs[128]. w = d·sc_j·q − dmin·mn_j.
template <>
struct Dot<DType::Q4_K> : KPairDot {
  __device__ static Share load(const uint8_t* w, int64_t s, const Lane& l) {
    const uint8_t* p = w + s * 144;
    const uint4 head = load_weight_u128(p);  // d, dmin, scales[12]
    uint4 qv[kHalves];
#pragma unroll
    for (int hh = 0; hh < kHalves; ++hh) qv[hh] = load_weight_u128(p + 16 + 32 * l.p + 16 * hh);
    Share b;
    set_scales(head, l, b);
#pragma unroll
    for (int hh = 0; hh < kHalves; ++hh) {
      const uint32_t words[4] = {qv[hh].x, qv[hh].y, qv[hh].z, qv[hh].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        b.lo[hh][i] = int(words[i] & 0x0F0F0F0Fu);
        b.hi[hh][i] = int((words[i] >> 4) & 0x0F0F0F0Fu);
      }
    }
    return b;
  }
};

// Q5_K: f16 d, dmin; scales[12]; qh[32]; qs[128]. As Q4_K, plus a fifth bit:
// bit j of qh[i] for element i of sub-block j.
template <>
struct Dot<DType::Q5_K> : KPairDot {
  __device__ static Share load(const uint8_t* w, int64_t s, const Lane& l) {
    const uint8_t* p = w + s * 176;
    const uint4 head = load_weight_u128(p);
    uint4 hv[kHalves], qv[kHalves];
#pragma unroll
    for (int hh = 0; hh < kHalves; ++hh) {
      hv[hh] = load_weight_u128(p + 16 + 16 * hh);
      qv[hh] = load_weight_u128(p + 48 + 32 * l.p + 16 * hh);
    }
    Share b;
    set_scales(head, l, b);
    const int j0 = 2 * l.p, j1 = 2 * l.p + 1;
#pragma unroll
    for (int hh = 0; hh < kHalves; ++hh) {
      const uint32_t words[4] = {qv[hh].x, qv[hh].y, qv[hh].z, qv[hh].w};
      const uint32_t high[4] = {hv[hh].x, hv[hh].y, hv[hh].z, hv[hh].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        b.lo[hh][i] = int((words[i] & 0x0F0F0F0Fu) | (((high[i] >> j0) & 0x01010101u) << 4));
        b.hi[hh][i] = int(((words[i] >> 4) & 0x0F0F0F0Fu) | (((high[i] >> j1) & 0x01010101u) << 4));
      }
    }
    return b;
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
  struct Lane {
    int first, hh, g;
    __device__ explicit Lane(int lane) : first(lane >> 3), hh((lane >> 2) & 1), g(lane & 3) {}
  };
  static constexpr int kStride = 4;
  // Pairs at 2-8 x rows (gemv_int8.cuh): 575 → 729 tokens/s at 4 rows, 640 →
  // 682 at 8; none at 1 (298.7 → 297.5).
  static constexpr bool pair_rows(int max_rows) { return max_rows > 1; }
  struct Share {
    float d;
    int scale[4];
    int q[4][2];  // [t][word]: signed q − 32 in each byte
  };
  struct XShare {
    int2 v[4];    // sub-block t's 8 values
    float dx[4];  // its x block's scale
  };
  __device__ static int64_t steps(const Int8Acts& x) { return x.k / 256; }
  __device__ static Share load(const uint8_t* w, int64_t s, const Lane& l) {
    const uint8_t* p = w + s * 210;
    uint32_t la[2], lb[2], qh[2], sc[2];
    load_u32x2_a2(p + 64 * l.hh + 8 * l.g, la);       // t = 0 (low nibbles), t = 2 (high)
    load_u32x2_a2(p + 64 * l.hh + 32 + 8 * l.g, lb);  // t = 1, t = 3
    load_u32x2_a2(p + 128 + 32 * l.hh + 8 * l.g, qh);
    load_u32x2_a2(p + 192 + 8 * l.hh, sc);  // sc[8hh .. 8hh+8)
    Share b;
    b.d = __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(p + 208))));
    // Scale of sub-block t for this lane's 8 elements: byte 2t + (g >> 1).
    const uint32_t sc_shift = 8u * uint32_t(l.g >> 1);
    b.scale[0] = int(int8_t(sc[0] >> sc_shift));
    b.scale[1] = int(int8_t(sc[0] >> (sc_shift + 16)));
    b.scale[2] = int(int8_t(sc[1] >> sc_shift));
    b.scale[3] = int(int8_t(sc[1] >> (sc_shift + 16)));
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t low[4] = {la[i] & 0x0F0F0F0Fu, lb[i] & 0x0F0F0F0Fu, (la[i] >> 4) & 0x0F0F0F0Fu,
                               (lb[i] >> 4) & 0x0F0F0F0Fu};
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const uint32_t v = low[t] | (((qh[i] >> (2 * t)) & 0x03030303u) << 4);
        b.q[t][i] = int(__vsub4(v, 0x20202020u));
      }
    }
    return b;
  }
  __device__ static XShare load_x(const Int8Acts& x, int r, int64_t s, const Lane& l) {
    const int64_t xb = s * 8 + 4 * l.hh;  // x block of sub-block t = 0
    const int8_t* xq = x.q + r * x.k + xb * 32 + 8 * l.g;
    const float2* ds = x.ds + r * x.n_blocks + xb;
    XShare v;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      v.v[t] = ldg_x8(xq + 32 * t);
      v.dx[t] = __ldg(&ds[t].x);
    }
    return v;
  }
  __device__ static float term(const Share& b, const XShare& x) {
    float sum = 0.0f;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int dot = __dp4a(b.q[t][1], x.v[t].y, __dp4a(b.q[t][0], x.v[t].x, 0));
      sum += x.dx[t] * float(b.scale[t] * dot);
    }
    return b.d * sum;
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
