// Integer GEMV (gemv_int8.cuh): activation quantization, the dispatch, and
// the 32-value block types Q8_0, Q4_0 and Q4_1.
#include "backend/cuda/gemv_int8.h"

#include "backend/cuda/gemv_int8.cuh"
#include "backend/cuda/norm_handoff.h"
#include "backend/cuda/row_norm.cuh"
#include "backend/cuda/runtime.h"

namespace brioche::cuda::detail {

namespace {

// Quantizes quad c (values 4c..4c+3) of an x row into q (the row's int8
// values) and, from the thread of the block's first quad, ds (the row's
// (dx, dx · Σq) per block of 32). The 8 quads of a block are held by 8
// consecutive lanes, which must all call it (`inside` false: a lane past the
// end, which joins the shuffles and stores nothing).
__device__ __forceinline__ void quantize_quad(float4 v, bool inside, int64_t c, int8_t* __restrict__ q,
                                              float2* __restrict__ ds) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int off = 4; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off, 8));
  const BlockScale s = block_scale(amax);
  const int q0 = __float2int_rn(v.x * s.inv), q1 = __float2int_rn(v.y * s.inv), q2 = __float2int_rn(v.z * s.inv),
            q3 = __float2int_rn(v.w * s.inv);
  int sum = q0 + q1 + q2 + q3;
#pragma unroll
  for (int off = 4; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off, 8);
  if (!inside) return;
  reinterpret_cast<char4*>(q)[c] = make_char4(char(q0), char(q1), char(q2), char(q3));
  if ((c & 7) == 0) ds[c / 8] = make_float2(s.d, s.d * float(sum));
}

// The quantization kernels' PDL prologue: a streamed GEMV after them
// launches first (launch.cuh).
__device__ __forceinline__ void quantize_prologue(bool streamed_next) {
  if (streamed_next)
    pdl_prologue_release_first();
  else
    pdl_prologue();
}

// One thread per 4 values (a 32-value block never spans two rows since k is
// a multiple of 32).
//   x  : [n, k] f32, row stride ldx
//   q  : [n, k] int8;  ds : [n, k/32] (dx, dx · Σq)
__global__ void quantize_acts_kernel(const float* __restrict__ x, int64_t ldx, int64_t k, int64_t total_quads,
                                     int8_t* __restrict__ q, float2* __restrict__ ds, bool streamed_next) {
  quantize_prologue(streamed_next);
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool inside = g < total_quads;
  const int64_t quads_per_row = k / 4;
  const int64_t r = g / quads_per_row, c = g % quads_per_row;
  const float* src = x + r * ldx + 4 * c;
  const float4 v = inside ? make_float4(src[0], src[1], src[2], src[3]) : make_float4(0.f, 0.f, 0.f, 0.f);
  quantize_quad(v, inside, c, q + r * k, ds + r * (k / 32));
}

// The same for x̂ = RMSNorm(x): one CTA per row normalizes it as `rms_norm`
// does (row_norm.cuh; the same bits) and quantizes x̂ from registers. Thread
// t holds quads t + j·blockDim.x, so 8 consecutive lanes hold a block.
__global__ void quantize_normed_acts_kernel(const float* __restrict__ x, int64_t ldx, int64_t k,
                                            const float* __restrict__ norm_w, float eps, int8_t* __restrict__ q,
                                            float2* __restrict__ ds, bool streamed_next) {
  float4 g[kRmsNormVec], v[kRmsNormVec];
  load_norm_weight(norm_w, k, g);
  quantize_prologue(streamed_next);
  const int64_t r = blockIdx.x;
  rms_norm_row(x + r * ldx, g, k, eps, v);
#pragma unroll
  for (int j = 0; j < kRmsNormVec; ++j) {
    const int64_t c = threadIdx.x + j * blockDim.x;
    quantize_quad(v[j], c < k / 4, c, q + r * k, ds + r * (k / 32));
  }
}

// The N aligned words covering a block that starts 4-byte aligned or 2 bytes
// past, and the shift (0 or 16 bits) that re-aligns them: value word i of the
// block is __funnelshift_rc(v[i], v[i + 1], shift) (its f16 scale the low
// half of v[0] >> shift).
template <int N>
__device__ __forceinline__ uint32_t load_realigned(const uint8_t* b, uint32_t (&v)[N]) {
  const uint32_t shift = uint32_t(reinterpret_cast<uintptr_t>(b) & 3) * 8;  // 0 or 16
  const uint8_t* base = b - shift / 8;
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = load_weight_u32(base + 4 * i);
  return shift;
}

// The same words, read as the 16-byte chunks that hold them and moved down
// by the block's word within its first chunk (two select stages). A warp's
// loads at a block stride touch about as many cache lines per instruction
// whether they take 4 bytes a lane or 16, so a block of many words needs
// fewer L1 wavefronts this way: Q8_0 (9 words) decoded 347.6 → 357.0
// tokens/s on Llama-3-8B, while Q4_0 (5 words, 2 chunks) lost 497 → 478.
// Every chunk read holds a byte of the block (N words from word 0..3 of a
// chunk end in chunk (3 + N) / 4 for the block sizes here), and device
// allocations end 16-byte aligned (the allocator's size classes), so no
// chunk reaches past the weight's allocation.
template <int N>
__device__ __forceinline__ uint32_t load_realigned_by_chunks(const uint8_t* b, uint32_t (&v)[N]) {
  constexpr int kChunks = (N + 3 + 3) / 4;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(b);
  const uint8_t* base = b - (addr & 15);
  uint32_t w[4 * kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const uint4 q = load_weight_u128(base + 16 * c);
    w[4 * c] = q.x;
    w[4 * c + 1] = q.y;
    w[4 * c + 2] = q.z;
    w[4 * c + 3] = q.w;
  }
  const uint32_t word = uint32_t(addr >> 2) & 3;  // the block's first word within the chunk
#pragma unroll
  for (int i = 0; i + 1 < 4 * kChunks; ++i) w[i] = (word & 1) ? w[i + 1] : w[i];
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = (word & 2) ? w[i + 2] : w[i];
  return uint32_t(addr & 3) * 8;  // 0 or 16
}

}  // namespace

// The three types below take one 32-value block per lane and step.
struct Block32Dot {
  using Lane = BlockLane;
  using XShare = Block32Acts;
  static constexpr int kStride = 32;
  static constexpr bool pair_rows(int) { return false; }  // (gemv_int8.cuh)
  __device__ static int64_t steps(const Int8Acts& x) { return x.n_blocks; }
  __device__ static XShare load_x(const Int8Acts& x, int r, int64_t c, const Lane&) {
    return load_block32_acts(x, r, c);
  }
};

// Q8_0, one block per lane: f16 d; int8 q[32]. The 34-byte blocks are
// re-aligned as for Q4_0 below, from 16-byte chunks: nine aligned words, d =
// low half of word 0 >> (0 or 16), q word i = funnel shift of words i, i+1 by
// 16 or 32. (Pairs of blocks per lane, 68 aligned bytes, measured 10-16%
// slower on the H200.)
template <>
struct Dot<DType::Q8_0> : Block32Dot {
  struct Share {
    float d;
    int q[8];
  };
  __device__ static Share load(const uint8_t* w, int64_t c, const Lane&) {
    uint32_t v[9];
    const uint32_t shift = load_realigned_by_chunks(w + c * 34, v);
    Share b;
    b.d = half_lo(v[0] >> shift);
#pragma unroll
    for (int i = 0; i < 8; ++i) b.q[i] = int(__funnelshift_rc(v[i], v[i + 1], 16 + shift));
    return b;
  }
  __device__ static float term(const Share& b, const XShare& x) {
    return b.d * x.ds.x * float(dot16(b.q + 4, x.hi, dot16(b.q, x.lo, 0)));
  }
};

// Q4_0, one block per lane: f16 d; q[16], byte i holding element i (low
// nibble) and i + 16 (high); w = d·(q − 8), so Σ w·x = d·(dx·Σq·xq − 8·sx).
// The 18-byte block starts 4-byte aligned (even block) or 2 bytes past (odd
// block); five aligned words cover it either way (an even block's fifth word
// ends inside the next block, which exists since the count is even).
// Re-aligned: d is the low half of word 0 shifted right by 0 or 16, q word i
// the funnel shift of words i, i+1 by 16 or 32 (clamped: the high word).
// (Pairs of blocks per lane, 36 aligned bytes, measured 20-28% slower on the
// H200: twice the bytes per lane spread each warp load over twice the lines.)
template <>
struct Dot<DType::Q4_0> : Block32Dot {
  struct Share {
    float d;
    int lo[4], hi[4];
  };
  __device__ static Share load(const uint8_t* w, int64_t c, const Lane&) {
    uint32_t v[5];
    const uint32_t shift = load_realigned(w + c * 18, v);
    Share b;
    b.d = half_lo(v[0] >> shift);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = __funnelshift_rc(v[i], v[i + 1], 16 + shift);
      b.lo[i] = int(q & 0x0F0F0F0Fu);
      b.hi[i] = int((q >> 4) & 0x0F0F0F0Fu);
    }
    return b;
  }
  __device__ static float term(const Share& b, const XShare& x) {
    return b.d * (x.ds.x * float(dot16(b.hi, x.hi, dot16(b.lo, x.lo, 0))) - 8.0f * x.ds.y);
  }
};

// Q4_1 blocks (20 bytes, 4-byte aligned): d, m in word 0, q[16] in words 1..4;
// w = d·q + m, so Σ w·x = d·dx·Σq·xq + m·sx.
template <>
struct Dot<DType::Q4_1> : Block32Dot {
  struct Share {
    float d, m;
    int lo[4], hi[4];
  };
  __device__ static Share load(const uint8_t* w, int64_t c, const Lane&) {
    const uint8_t* p = w + c * 20;
    uint32_t v[5];
#pragma unroll
    for (int i = 0; i < 5; ++i) v[i] = load_weight_u32(p + 4 * i);
    Share b;
    b.d = half_lo(v[0]);
    b.m = half_hi(v[0]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      b.lo[i] = int(v[1 + i] & 0x0F0F0F0Fu);
      b.hi[i] = int((v[1 + i] >> 4) & 0x0F0F0F0Fu);
    }
    return b;
  }
  __device__ static float term(const Share& b, const XShare& x) {
    return b.d * x.ds.x * float(dot16(b.hi, x.hi, dot16(b.lo, x.lo, 0))) + b.m * x.ds.y;
  }
};

void gemv_int8_blocks32(DType wtype, const GemvArgs& a, const Int8Acts& x) {
  switch (wtype) {
    case DType::Q8_0: return launch_int8<DType::Q8_0>(a, x);
    case DType::Q4_0: return launch_int8<DType::Q4_0>(a, x);
    case DType::Q4_1: return launch_int8<DType::Q4_1>(a, x);
    default: fail("gemv_int8_blocks32: ", dtype_name(wtype), " is not a 32-value block type");
  }
}

bool gemv_int8_covers(DType wtype, const GemvArgs& a) {
  // Row strides and bases the loads assume: 16-byte loads of K-quant
  // super-blocks, whole words of the 32-value types, halves for Q6_K (210-byte
  // super-blocks are read with re-aligned word loads).
  int64_t k_multiple = 0;
  size_t row_align = 0, base_align = 4;
  switch (wtype) {
    case DType::Q8_0:
    case DType::Q4_0:
      k_multiple = 64;
      row_align = 4;
      break;
    case DType::Q4_1:
      k_multiple = 32;
      row_align = 4;
      break;
    case DType::Q4_K:
    case DType::Q5_K:
      k_multiple = 256;
      row_align = base_align = 16;
      break;
    case DType::Q6_K:
      k_multiple = 256;
      row_align = 2;
      break;
    default:
      if (affine_bits(wtype) == 0) return false;
      // MLX affine: 8-byte loads of the groups' scales and q (groups of 32 to 128).
      k_multiple = std::max(32, dtype_info(wtype).block_elems);
      row_align = base_align = 8;
      break;
  }
  if (a.k % k_multiple != 0 || a.n < 1 || a.n > 8) return false;
  // Bases word-aligned at least: Q6_K's re-aligned loads may start 2 bytes
  // before a super-block, which must stay inside the weight.
  auto aligned = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % base_align == 0; };
  for (int p = 0; p < a.n_parts; ++p)
    if (!aligned(a.parts[p].w) || a.parts[p].w_row_bytes % row_align != 0) return false;
  return a.w_up == nullptr || aligned(a.w_up);
}

bool gemv_int8_takes_norm(const GemvArgs& a) {
  auto aligned16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  return rms_norm_threads(a.k) > 0 && aligned16(a.x) && a.ldx % 4 == 0 && aligned16(a.norm_w);
}

Int8Scratch allocate_int8_acts(int n, int64_t k) {
  const size_t q_bytes = size_t(n) * size_t(k);
  Int8Scratch s{.memory = allocate(q_bytes + size_t(n) * size_t(k / 32) * sizeof(float2)), .k = k};
  s.q = static_cast<int8_t*>(s.memory.get());
  s.ds = reinterpret_cast<float2*>(s.q + q_bytes);
  return s;
}

namespace {

// The integer GEMV on quantized x, on the kernel chosen once per launch;
// a streamed launch that adds to y hands y's norm on where its request
// (a.hand_on) asks (norm_handoff.h). `x_sum_sq`: x is a norm handed on to this
// launch (streamed only).
void launch_quantized(DType wtype, const GemvArgs& a, const Int8Acts& x, bool streamed,
                      const float* x_sum_sq = nullptr) {
  HandedNorm norm = begin_handoff(a, streamed && gemv_stream_rows_hands_on(wtype, a));
  if (streamed)
    gemv_stream_rows(wtype, a, x, {.normed_out = norm.written_as(), .x_sum_sq = x_sum_sq});
  else if (wtype == DType::Q4_K || wtype == DType::Q5_K || wtype == DType::Q6_K)
    gemv_int8_kquants(wtype, a, x);
  else if (wtype == DType::Q8_0 || wtype == DType::Q4_0 || wtype == DType::Q4_1)
    gemv_int8_blocks32(wtype, a, x);
  else
    gemv_int8_affine(wtype, a, x);
  if (norm) hand_on(a, std::move(norm));
}

}  // namespace

void gemv_int8(DType wtype, const GemvArgs& a) {
  BRIOCHE_CHECK(gemv_int8_covers(wtype, a), "gemv_int8: ", dtype_name(wtype), " with k = ", a.k, ", n = ", a.n,
                " and these weight strides/alignments is not on the int8 path");
  const Int8Scratch x = allocate_int8_acts(a.n, a.k);
  const bool streamed = gemv_stream_rows_takes(wtype, a);
  if (a.norm_w != nullptr) {
    BRIOCHE_CHECK(gemv_int8_takes_norm(a),
                  "gemv_int8: the RMSNorm of x fuses for k up to 16,384 with 16-byte "
                  "aligned x rows and norm weight; got k ",
                  a.k, ", row stride ", a.ldx, " floats");
    launch_dependent(quantize_normed_acts_kernel, unsigned(a.n), rms_norm_threads(a.k), 0, a.x, a.ldx, a.k, a.norm_w,
                     a.norm_eps, x.q, x.ds, streamed);
  } else {
    const int64_t total_quads = int64_t(a.n) * a.k / 4;
    constexpr int kThreads = 256;
    launch_dependent(quantize_acts_kernel, unsigned((total_quads + kThreads - 1) / kThreads), kThreads, 0, a.x, a.ldx,
                     a.k, total_quads, x.q, x.ds, streamed);
  }
  launch_quantized(wtype, a, x.acts(), streamed);
}

bool gemv_int8_handed(DType wtype, const GemvArgs& a, const HandedNorm& norm) {
  if (!norm || a.n != 1 || norm.x.k != a.k || !gemv_quant_reads_int8(wtype, a) || !gemv_stream_rows_takes(wtype, a))
    return false;
  launch_quantized(wtype, a, norm.x.acts(), true, norm.sum_sq());
  count_handed_norm_read();
  return true;
}

void gemv_int8_quantized(DType wtype, const GemvArgs& a, const Int8Acts& x) {
  BRIOCHE_CHECK(gemv_int8_covers(wtype, a) && x.k == a.k, "gemv_int8_quantized: expected ", dtype_name(wtype),
                " weights on the int8 path with x quantized at their k ", a.k, "; got x at k ", x.k, ", n ", a.n,
                gemv_int8_covers(wtype, a) ? "" : " (not on the int8 path)");
  launch_quantized(wtype, a, x, gemv_stream_rows_takes(wtype, a));
}

}  // namespace brioche::cuda::detail
