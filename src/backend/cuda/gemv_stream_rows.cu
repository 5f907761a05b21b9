// The streamed decode GEMV for Q8_0, Q4_0, Q4_K, Q5_K, Q6_K and MLX affine weights
// against int8 x (gemv_int8.cuh): tiles of whole weight rows brought into
// shared memory by the bulk copy engine (the pipeline of gemv_stream.cuh),
// read by consumer threads that each own a fixed 256-value column chunk (one
// K-quant super-block: 144, 176 or 210 bytes), or half of one (ChunkOf:
// kSplit).
//
// Why not gemv_stream.cu's tiles (8 rows × 2,048 values): a 32-value block
// of these types is 34 or 18 bytes, 2-byte aligned, so a thread owning a
// quarter block read it as 16-bit halves: ~40 shared loads per thread and
// tile with bank conflicts, and a tile of half the bytes cost as long as a
// bf16 one (docs/perf-log/cuda-decode.md#bf16-streamed-gemv). Here a thread owns 8 consecutive blocks (256
// values: 272 bytes of Q8_0, 144 of Q4_0, both whole 16-byte vectors), reads
// them as 16-byte shared loads and re-aligns the blocks in registers with
// shifts the compiler resolves (block offsets are constants). Its x chunk
// (256 int8 values and 8 block scales) is loaded once, after the PDL wait,
// and stays in registers for every tile, since the thread's columns never
// change. A tile is R consecutive rows (8, 4 or 2 for k up to 4,096, 8,192,
// 16,384: 16, 32 or 64 threads a row), which the copy engine brings in with
// one bulk copy when they are contiguous (rows of one part, packed).
//
// SwiGLU (k ≤ 4,096 only): a warp's two half-warps take gate row j and up
// row j; a tile is 4 gate rows then 4 up rows.
//
// A CTA is 4 consumer warps and a producer warp (8 consumer warps where two
// threads share a chunk: ChunkOf's kSplit); the type says how many CTAs
// share an SM (and its 200 KB of tile slots). Llama-3-8B decode at batch 1:
// Q8_0 358–359 → 368–369 tokens/s, Q4_0 494–496 → 509–510 (the warp kernels
// of gemv_int8.cuh before). BRIOCHE_CUDA_GEMV_STREAM_INT8=0 keeps
// the warp kernels, for A/B runs.
#include "backend/cuda/gemv_int8.h"

#include <cuda_fp16.h>

#include "backend/cuda/gemv_int8.cuh"
#include "backend/cuda/gemv_stream.cuh"
#include "core/env_switch.h"

namespace brioche::cuda::detail {

namespace {

using stream::RingPosition;

constexpr int kChunkWarps = 4;     // consumer warps of a CTA at one thread a chunk
constexpr int kChunkValues = 256;  // a chunk: 8 blocks, or one K-quant super-block
// Chunks a row of the short launches (k ≤ 4,096: Q/K/V, O, the lm_head, and
// SwiGLU's gate/up, which only they take): rows of 16 threads, or of 32 where
// two threads share a chunk. Longer rows (down) take 32 or 64 threads.
constexpr int kShortChunks = 16;
constexpr int kMaxStages = 8;
// Shared memory for tiles in flight per SM (of the 228 KB it has), split
// between the type's CTAs per SM.
constexpr int kSmBudget = 200 << 10;

// The word starting at halfword h (static): aligned, or two halves.
template <int N>
__device__ __forceinline__ uint32_t word_at(const uint32_t (&v)[N], int h) {
  return h % 2 == 0 ? v[h / 2] : __funnelshift_r(v[h / 2], v[h / 2 + 1], 16);
}

// A thread's x: its kValues int8 values (a chunk or half of one; kValues / 4
// words) and per block (dx, sx).
template <int kValues>
struct XPart {
  static constexpr int kBlocks = kValues / 32;
  int q[kValues / 4];
  float2 ds[kBlocks];
};

// Part `part` of x (parts of kValues values).
template <int kValues>
__device__ __forceinline__ XPart<kValues> load_x_part(const Int8Acts& x, int64_t part) {
  XPart<kValues> c;
  const int4* q = reinterpret_cast<const int4*>(x.q + part * kValues);
#pragma unroll
  for (int i = 0; i < kValues / 16; ++i) {
    const int4 v = __ldg(q + i);
    c.q[4 * i] = v.x, c.q[4 * i + 1] = v.y, c.q[4 * i + 2] = v.z, c.q[4 * i + 3] = v.w;
  }
#pragma unroll
  for (int b = 0; b < kValues / 32; ++b) c.ds[b] = __ldg(x.ds + part * (kValues / 32) + b);
  return c;
}

// Σ over a chunk's 8 blocks of d_b · block_dot(b, q_b): block b starts at
// halfword kBlockBytes/2 · b with its f16 scale d_b, and its quants at
// halfword q_b = that + 1. The loop is unrolled, so every index is static
// and v stays in registers.
template <int kBlockBytes, int kBlocks, int N, class BlockDot>
__device__ __forceinline__ float sum_blocks(const uint32_t (&v)[N], BlockDot block_dot) {
  float sum = 0.0f;
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    const int h = b * kBlockBytes / 2;
    sum += half_lo(v[h / 2] >> (16 * (h % 2))) * block_dot(b, h + 1);
  }
  return sum;
}

// Σ over kGroups groups g of a K-quant super-block's sub-blocks 2g and 2g +
// 1 (all 4 groups, or a half super-block's two: groups 2·half + g):
// group_dots(g, i, s0, s1) adds word i (0..7) of each sub-block's quants
// against x (__dp4a into s0 and s1; s1 2^kHighShift times its sum when the
// high nibbles stay in place); the scales (d, dmin in word 0, the 12 scale
// bytes in words 1..3) turn the two integer sums into floats:
//   d · Σ_j sc_j·dx_j·S_j − dmin · Σ_j mn_j·sx_j.
// The 8 sub-blocks' 6-bit scales and mins are decoded at once, a byte each
// (k_scale_min_pair's rule on whole words: sub-blocks 0..3 are the low 6
// bits of bytes 0..3 and 4..7; 4..7 take the nibbles of bytes 8..11 and the
// top 2 bits of bytes 0..7), sc_j·S_j is an integer product (exact in
// float: under 2^24), and d, dmin multiply once: ~20 instructions fewer a
// super-block than decoding and converting per group. Llama-3-8B decode
// run ahead, A/B in one call: Q4_K 565.5–566.9 → 573.3–575.0 tokens/s, Q5_K
// at par.
template <int kHighShift, int kGroups, int N, int kValues, class GroupDots>
__device__ __forceinline__ float sum_k_groups(const uint32_t (&v)[N], const XPart<kValues>& x, int half,
                                              GroupDots group_dots) {
  static_assert(kGroups == 4 || kGroups == 2);
  const uint32_t scales[2] = {v[1] & 0x3F3F3F3Fu, (v[3] & 0x0F0F0F0Fu) | ((v[1] >> 2) & 0x30303030u)};
  const uint32_t mins[2] = {v[2] & 0x3F3F3F3Fu, ((v[3] >> 4) & 0x0F0F0F0Fu) | ((v[2] >> 2) & 0x30303030u)};
  // Group g's word of scales or mins (a select on `half`, not a run-time
  // index, which would put the array in local memory).
  auto word_of = [&](const uint32_t(&w)[2], int g) { return kGroups == 4 ? w[g / 2] : (half != 0 ? w[1] : w[0]); };
  float scaled = 0.0f, offset = 0.0f;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) group_dots(g, i, s0, s1);
    s1 >>= kHighShift;             // (exact: a multiple of 2^kHighShift)
    const int byte = 2 * (g % 2);  // the group's first sub-block's byte in its word
    const uint32_t sc = word_of(scales, g), mn = word_of(mins, g);
    const int sc0 = int(__byte_perm(sc, 0, 0x4440 + byte));
    const int sc1 = int(__byte_perm(sc, 0, 0x4441 + byte));
    const int mn0 = int(__byte_perm(mn, 0, 0x4440 + byte));
    const int mn1 = int(__byte_perm(mn, 0, 0x4441 + byte));
    const float2 x0 = x.ds[2 * g], x1 = x.ds[2 * g + 1];
    scaled += x0.x * float(sc0 * s0) + x1.x * float(sc1 * s1);
    offset += float(mn0) * x0.y + float(mn1) * x1.y;
  }
  return half_lo(v[0]) * scaled - half_hi(v[0]) * offset;
}

// What a chunk type fixes: the bytes of a thread's 256 values (whole
// 16-byte vectors), the words they fill, the CTAs that share an SM, how many
// tiles a CTA's producer asks for before the PDL wait (EarlyTiles, below),
// and whether a thread gives its tile slot back to the producer once its
// share is in registers (before the arithmetic: the next copy is asked for
// that much earlier, for ~30 more registers). Llama-3-8B decode, old and
// new binaries alternating in one call, in two calls: Q4_K 504–507 →
// 515–516 tokens/s; Q4_0, Q5_K and Q6_K unchanged (514–517 against 513–516,
// 450–451 both, 385 against 384–386); Q8_0 395 → 390. So only Q4_K releases
// first, and not in Q/K/V and the lm_head (Q4_KChunk). (The same in the bf16
// streamed GEMV: 259 → 258.) Since then Q4_0's gate/up releases first too
// (2026-12-02, two calls: 648.6 / 651.5 → 652.7 / 652.7, then 650.6–653.2
// → 652.0–656.5 tokens/s run ahead, forward alone 651.3–651.8 → 653.9–654.0);
// its down (640.0 / 642.5) and O (at par) do not.
//
// EarlyTiles: the kernel before a GEMV is a short one (a norm, an x
// quantization, the attention), bound by L2 round trips. Tiles the GEMV's
// producers ask for before their PDL wait are requests that those round
// trips queue behind: a whole ring per CTA (~20–26 MB over the GPU) took the
// 14-CTA x quantization between gate/up and down from ~3 to ~6 µs. So a
// producer asks for a few tiles first, waits for the kernel before as the
// consumers do, then fills the rest of its ring. Tiles first, by A/B runs
// (docs/perf-log/cuda-decode.md#early-tiles): Q4_0 1, Q4_K/Q5_K/Q6_K 2, Q8_0 3 (Q8_0 has one CTA per
// SM and tiles of twice the bytes). None at all loses (Q4_0 544 → 526
// tokens/s): HBM then idles during the kernel before. Q4_0 takes 2 before
// gate/up, whose kernel before is the norm (8B decode run ahead, three A/B
// calls: +0.7–0.8%, 591.5–592.4 → 593.4–596.5 tokens/s in the last), and 2
// before down since the weights leave L2 first (stream::weights_evict_first;
// two calls: 612.3–614.0 → 616.8–617.1, 612.6–613.9 → 615.3–617.6). Since
// O and down add to y with red.add (add_to_output in gemv.cuh), Q8_0's O
// takes 2 and its down 4 (two calls, 2026-12-02, against 441.2–443.4: O 2
// 443.3–445.2, down 4 443.3–445.7, both 445.9–447.1 tokens/s). More
// or fewer were at par or slower at every other position and type, before
// and after those changes (docs/perf-log/cuda-decode.md#weights-evict-first, #red-add).
//
// kSplit: threads a chunk (1, or 2 in the O of Q4_K, Q4_0 and Q8_0:
// launch_chunks; Q4_K's Q/K/V took 2 until Q4_KChunk's change below). Each
// thread's tile row is one dependent chain of shared loads and __dp4a, on
// the decode's time in a short GEMV's ramp and tail. Two threads a chunk, 128 values each (a part: X; a half chunk of
// Q8_0 or Q4_0 is 136 or 72 bytes, read as 8-byte loads), halve it, with 8
// consumer warps a CTA, rows of 32 threads and the tile unchanged.
// Llama-3-8B decode run ahead, A/B: Q4_K (Q/K/V and O) 574.8–576.5 →
// 581.2–584.9 tokens/s (Q/K/V 6.85 → 6.02 µs a layer in the trace); O
// alone, two calls: Q4_0 594.2–595.8 → 598.6–599.2 and 595.6–595.9 →
// 597.4–597.5, Q8_0 428.5–429.0 → 430.0–430.1 and 432.9 → 433.5. Not
// elsewhere (docs/perf-log/cuda-decode.md#two-threads-a-chunk, "two threads a chunk"): with Q/K/V
// split too Q4_0 and Q8_0 lost 0.6–1.6% (Q4_0's Q/K/V CTAs then leave no
// room beside them for the attention's), and where a row spans warps (down,
// or SwiGLU's gate and up rows) the sums' exchange through shared memory
// every tile cost more than the halved chain saved (gate/up +1.5 µs).
//
// The tiles first per launch: those of k ≤ 4,096 without SwiGLU that write y
// (Q/K/V, the lm_head) and that add to it (O), gate/up (SwiGLU), down (k >
// 4,096).
struct EarlyTiles {
  int short_k, short_accumulating, swiglu, long_k;
};
constexpr EarlyTiles early_tiles(int n) { return {n, n, n, n}; }

template <int kChunkBytes_, int kCtasPerSm_, EarlyTiles kEarly_, bool kReleaseBeforeDot_ = false, int kSplit_ = 1>
struct ChunkOf {
  static constexpr int kChunkBytes = kChunkBytes_;
  static constexpr int kSplit = kSplit_, kPartValues = kChunkValues / kSplit, kPartBytes = kChunkBytes / kSplit;
  static constexpr int kWords = (kPartBytes + 3) / 4;
  static constexpr int kCtasPerSm = kCtasPerSm_;
  static constexpr EarlyTiles kEarly = kEarly_;
  static constexpr bool kReleaseBeforeDot = kReleaseBeforeDot_;
  static constexpr int kConsumerWarps = kChunkWarps * kSplit, kConsumerThreads = kConsumerWarps * 32;
  static constexpr int kThreads = kConsumerThreads + 32;  // the last warp produces
  using X = XPart<kPartValues>;
  // Part `part` of a tile row as 16-byte shared loads (8-byte ones for a
  // half chunk of Q8_0 or Q4_0: 136 or 72 bytes).
  __device__ static void load(const uint8_t* row, int part, uint32_t (&v)[kWords]) {
    if constexpr (kPartBytes % 16 == 0) {
      const uint4* src = reinterpret_cast<const uint4*>(row + size_t(part) * kPartBytes);
#pragma unroll
      for (int i = 0; i < kWords / 4; ++i) {
        const uint4 q = src[i];
        v[4 * i] = q.x, v[4 * i + 1] = q.y, v[4 * i + 2] = q.z, v[4 * i + 3] = q.w;
      }
    } else {
      static_assert(kPartBytes % 8 == 0, "a part of whole 8-byte words");
      const uint2* src = reinterpret_cast<const uint2*>(row + size_t(part) * kPartBytes);
#pragma unroll
      for (int i = 0; i < kWords / 2; ++i) {
        const uint2 q = src[i];
        v[2 * i] = q.x, v[2 * i + 1] = q.y;
      }
    }
  }
};

// Q8_0: f16 d, then q[32] (int8); a block gives d·dx·Σ q·xq.
// One CTA per SM (5 tiles of 8 rows in flight at k = 4,096): Llama-3-8B
// decode 355 → 363 tokens/s; two CTAs (2 tiles each) 348.
template <int kSplit = 1>
struct Q8_0Chunk
    : ChunkOf<8 * 34, 1, EarlyTiles{.short_k = 3, .short_accumulating = 2, .swiglu = 3, .long_k = 4}, false, kSplit> {
  using Base = Q8_0Chunk::ChunkOf;
  using Base::kWords;
  using typename Base::X;
  static constexpr int kBlockBytes = 34;
  __device__ static float dot(const uint32_t (&v)[kWords], const X& x, int) {
    return sum_blocks<kBlockBytes, X::kBlocks>(v, [&](int b, int q) {
      int s0 = 0, s1 = 0;  // two chains of __dp4a
#pragma unroll
      for (int i = 0; i < 8; i += 2) {
        s0 = __dp4a(int(word_at(v, q + 2 * i)), x.q[8 * b + i], s0);
        s1 = __dp4a(int(word_at(v, q + 2 * i + 2)), x.q[8 * b + i + 1], s1);
      }
      return x.ds[b].x * float(s0 + s1);
    });
  }
};

// Q4_0: f16 d, then q[16] (byte i: element i in the low nibble, i + 16 in
// the high one); w = d·(q − 8), so a block gives d·(dx·Σ q·xq − 8·sx).
// Two CTAs per SM (8 consumer warps, 5 tiles each in flight): Llama-3-8B
// decode 486–493 → 499–509 tokens/s; one CTA (4 consumer warps for tiles of
// half the bytes) 415–418.
template <int kSplit = 1, bool kReleaseEarly = false>
struct Q4_0Chunk : ChunkOf<8 * 18, 2, EarlyTiles{.short_k = 1, .short_accumulating = 1, .swiglu = 2, .long_k = 2},
                           kReleaseEarly, kSplit> {
  using Base = Q4_0Chunk::ChunkOf;
  using Base::kWords;
  using typename Base::X;
  static constexpr int kBlockBytes = 18;
  __device__ static float dot(const uint32_t (&v)[kWords], const X& x, int) {
    return sum_blocks<kBlockBytes, X::kBlocks>(v, [&](int b, int q) {
      int s0 = 0, s1 = 0;  // low nibbles, 16 × high nibbles: two chains of __dp4a
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t w = word_at(v, q + 2 * i);
        s0 = __dp4a(int(w & 0x0F0F0F0Fu), x.q[8 * b + i], s0);
        s1 = dp4a_unsigned_signed(w & 0xF0F0F0F0u, x.q[8 * b + 4 + i], s1);
      }
      return x.ds[b].x * float(s0 + (s1 >> 4)) - 8.0f * x.ds[b].y;
    });
  }
};

// Q4_K: one super-block: f16 d and dmin (word 0), 12 scale bytes (words
// 1..3), qs[128] (words 4..35), whose 32-byte group g holds sub-block 2g in
// its low nibbles and 2g + 1 in its high ones; sub-block j gives
// d·sc_j·dx_j·Σ q·xq − dmin·mn_j·sx_j (gemv_int8.cuh: k_scale_min_pair).
// Two CTAs per SM, as Q4_0 (the same 144 bytes a chunk). Split (kSplit 2),
// a thread's half super-block is the header (words 0..3) and the 64 quant
// bytes of groups 2·half and 2·half + 1 (words 4..19).
//
// Q/K/V and the lm_head (Q4_KShort) take Q4_0's configuration: one thread a
// chunk, the slot given back after the dot product, one tile before the PDL
// wait. Two such CTAs hold Q4_0's share of an SM's registers (ptxas: 126 a
// thread at 160 threads, 40,960 a pair, against 90 at 288 and 55,296 split),
// which leaves an attention CTA room beside them before they end, as with
// Q4_0 (docs/cuda.md, "share SMs by registers"). Found by putting Q4_0
// weights at one position of a Q4_K model (`cuda_model_bench --dtype-at`,
// the same bytes): only at Q/K/V did the step change, 637.2 / 634.8 →
// 651.6 / 650.9 tokens/s, faster than Q4_0 everywhere (645.2 / 647.8;
// Q4_K's gate/up is the faster one).
// Llama-3-8B decode run ahead, A/B in one call each (2026-12-02): split with
// the early release (before) 638.6 / 640.7 and 633.0 / 633.7 → 650.7 /
// 653.2 and 648.6 / 650.2; unsplit with 2 tiles first 649.2 / 649.8;
// unsplit keeping the early release 630.3 / 631.4 (why the unsplit launch
// lost before); split without it 636.7 / 635.3. O kept as it was: unsplit
// or without the early release it lost 0.8–2%.
template <int kSplit = 1, bool kReleaseEarly = true, int kTilesFirst = 2>
struct Q4_KChunk : ChunkOf<144, 2, early_tiles(kTilesFirst), kReleaseEarly, kSplit> {
  using Base = Q4_KChunk::ChunkOf;
  using typename Base::X;
  static constexpr int kGroups = 4 / kSplit, kQuantsWord = 4, kWords = 4 + 8 * kGroups;
  __device__ static void load(const uint8_t* row, int part, uint32_t (&v)[kWords]) {
    const uint4* src = reinterpret_cast<const uint4*>(row + part / kSplit * Base::kChunkBytes);
    const int quants = 1 + 2 * kGroups * (part % kSplit);  // the part's first quant vector
#pragma unroll
    for (int i = 0; i < kWords / 4; ++i) {
      const uint4 q = src[i == 0 ? 0 : quants + i - 1];
      v[4 * i] = q.x, v[4 * i + 1] = q.y, v[4 * i + 2] = q.z, v[4 * i + 3] = q.w;
    }
  }
  __device__ static float dot(const uint32_t (&v)[kWords], const X& x, int part) {
    return sum_k_groups<4, kGroups>(v, x, part % kSplit, [&](int g, int i, int& s0, int& s1) {
      const uint32_t w = v[kQuantsWord + 8 * g + i];
      s0 = __dp4a(int(w & 0x0F0F0F0Fu), x.q[16 * g + i], s0);
      s1 = dp4a_unsigned_signed(w & 0xF0F0F0F0u, x.q[16 * g + 8 + i], s1);
    });
  }
};

using Q4_KShort = Q4_KChunk<1, false, 1>;

// Q5_K: as Q4_K with qh[32] (words 4..11) before qs (words 12..43): bit j of
// qh[i] is the fifth bit of element i of sub-block j.
struct Q5_KChunk : ChunkOf<176, 2, early_tiles(2)> {
  static constexpr int kHighWord = 4, kQuantsWord = 12;
  __device__ static float dot(const uint32_t (&v)[kWords], const X& x, int) {
    return sum_k_groups<0, 4>(v, x, 0, [&](int g, int i, int& s0, int& s1) {
      const uint32_t w = v[kQuantsWord + 8 * g + i], h = v[kHighWord + i];
      s0 = __dp4a(int((w & 0x0F0F0F0Fu) | (((h >> (2 * g)) & 0x01010101u) << 4)), x.q[16 * g + i], s0);
      s1 = __dp4a(int(((w >> 4) & 0x0F0F0F0Fu) | (((h >> (2 * g + 1)) & 0x01010101u) << 4)), x.q[16 * g + 8 + i], s1);
    });
  }
};

// Q6_K: ql[128] (words 0..31), qh[64] (32..47), int8 scales[16] (48..51),
// f16 d (low half of word 52). Sub-block t of half hh (x block 4hh + t):
// element i has its low 4 bits in ql[64hh + 32(t&1) + i] (nibble t >> 1),
// its top 2 in qh[32hh + i] (bits 2t, 2t + 1), and the scale sc[8hh + 2t +
// i/16]; w = d·sc·(q − 32), with q − 32 formed per byte (__vsub4) so the
// products need no offset term. 210 bytes: chunk c starts 2·(c mod 8) bytes
// past a 16-byte boundary (rows are 16-byte aligned: k a multiple of
// 2,048), so its words are read as the 14 aligned vectors around it and
// moved down in registers by selects on that per-thread constant (a
// register array indexed at run time would go to local memory); the last
// chunk of a row ends its 224-byte window exactly at the row's end.
struct Q6_KChunk : ChunkOf<210, 2, early_tiles(2)> {
  __device__ static void load(const uint8_t* row, int chunk, uint32_t (&v)[kWords]) {
    const int h = chunk & 7;  // halfwords past the boundary
    const uint4* src = reinterpret_cast<const uint4*>(row + size_t(chunk) * kChunkBytes - 2 * h);
    uint32_t w[57];
#pragma unroll
    for (int i = 0; i < 14; ++i) {
      const uint4 q = src[i];
      w[4 * i] = q.x, w[4 * i + 1] = q.y, w[4 * i + 2] = q.z, w[4 * i + 3] = q.w;
    }
    w[56] = 0;  // (only word 52's low half, d, is used: its high half may come from here)
    const bool odd_word = (h >> 1) & 1, two_words = (h >> 1) & 2;
#pragma unroll
    for (int i = 0; i < 56; ++i) w[i] = odd_word ? w[i + 1] : w[i];
#pragma unroll
    for (int i = 0; i < 54; ++i) w[i] = two_words ? w[i + 2] : w[i];
    const uint32_t shift = 16u * uint32_t(h & 1);
#pragma unroll
    for (int i = 0; i < kWords; ++i) v[i] = __funnelshift_r(w[i], w[i + 1], shift);
  }
  __device__ static float dot(const uint32_t (&v)[kWords], const X& x, int) {
    float sum = 0.0f;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int b = 4 * hh + t;
        int s0 = 0, s1 = 0;  // elements 0..15 and 16..31: one scale each
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const uint32_t ql = v[16 * hh + 8 * (t & 1) + j], qh = v[32 + 8 * hh + j];
          const uint32_t q = ((ql >> (4 * (t >> 1))) & 0x0F0F0F0Fu) | (((qh >> (2 * t)) & 0x03030303u) << 4);
          const int centered = int(__vsub4(q, 0x20202020u));
          if (j < 4)
            s0 = __dp4a(centered, x.q[8 * b + j], s0);
          else
            s1 = __dp4a(centered, x.q[8 * b + j], s1);
        }
        const int sc = 8 * hh + 2 * t;  // scale bytes sc, sc + 1 (words 48..51)
        const int sc0 = int(int8_t(v[48 + sc / 4] >> (8 * (sc % 4))));
        const int sc1 = int(int8_t(v[48 + (sc + 1) / 4] >> (8 * ((sc + 1) % 4))));
        sum += x.ds[b].x * float(sc0 * s0 + sc1 * s1);
      }
    }
    return half_lo(v[52]) * sum;
  }
};

// MLX affine, kBits of q in groups of kGroup values: a chunk is 256 / kGroup
// groups of (f32 scale, f32 bias, q packed little-end first), whole 16-byte
// vectors for every affine type. x block b of the chunk gives
// scale·dx·Σ q·xq + offset·sx, q decoded as the warp kernels do
// (gemv_int8.cuh: affine8_centered, affine4_in_order, affine_offset). CTAs
// per SM and tiles first as the GGUF type of the same bits (Q4_0, Q8_0; not
// Q4_0's second gate/up and down tiles, which were measured on Q4_0 alone).
template <int kBits, int kGroup>
using AffineChunkOf =
    ChunkOf<(256 / kGroup) * (8 + kGroup * kBits / 8), kBits == 4 ? 2 : 1, early_tiles(kBits == 4 ? 1 : 3)>;
template <int kBits, int kGroup>
struct AffineChunk : AffineChunkOf<kBits, kGroup> {
  using AffineChunkOf<kBits, kGroup>::kWords;
  using typename AffineChunkOf<kBits, kGroup>::X;
  static constexpr int kGroupWords = 2 + kGroup * kBits / 32;
  __device__ static float dot(const uint32_t (&v)[kWords], const X& x, int) {
    float sum = 0.0f;
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      const int g = b * 32 / kGroup, q0 = g * kGroupWords + 2 + (b * 32 % kGroup) / 32 * kBits;
      const float scale = __uint_as_float(v[g * kGroupWords]), bias = __uint_as_float(v[g * kGroupWords + 1]);
      int s0 = 0, s1 = 0;  // two chains of __dp4a
      if constexpr (kBits == 8) {
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
          s0 = __dp4a(affine8_centered(v[q0 + i]), x.q[8 * b + i], s0);
          s1 = __dp4a(affine8_centered(v[q0 + i + 1]), x.q[8 * b + i + 1], s1);
        }
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const AffineNibbles q = affine4_in_order(v[q0 + i]);
          s0 = __dp4a(q.first, x.q[8 * b + 2 * i], s0);
          s1 = __dp4a(q.second, x.q[8 * b + 2 * i + 1], s1);
        }
      }
      sum += scale * x.ds[b].x * float(s0 + s1) + affine_offset<kBits>(scale, bias) * x.ds[b].y;
    }
    return sum;
  }
};

// A launch that hands y's norm on (NormedOut, norm_handoff.h) has one CTA
// per 32 output rows, 128 CTAs for the 8B shape's 4,096 rows: the chunk
// type with 8 consumer warps and the SM to itself, so an SM has the
// consumers it has under the round-robin walk (two CTAs of 4 warps).
constexpr int kMaxConsumerWarps = 8;
constexpr int kHandoffRows = 32;  // a block of the next GEMV's x

// Named barriers of the consumer warps (0 is __syncthreads'): a row's two
// warps at 64 threads a row (warps 2i, 2i + 1: barrier kRowPairBarrier + i),
// and all of them before a handoff's end.
constexpr int kRowPairBarrier = 1;
constexpr int kHandoffBarrier = kRowPairBarrier + kMaxConsumerWarps / 2;

template <class C>
struct EightWarpsOf : C {
  static constexpr int kConsumerWarps = kMaxConsumerWarps, kConsumerThreads = kConsumerWarps * 32;
  static constexpr int kThreads = kConsumerThreads + 32;
  static constexpr int kCtasPerSm = 1;
};
template <class C>
using EightWarps = std::conditional_t<C::kConsumerWarps == kMaxConsumerWarps, C, EightWarpsOf<C>>;

struct Shared {
  uint64_t full[kMaxStages];
  uint64_t empty[kMaxStages];
  float partials[2][kMaxConsumerWarps];  // a row's two warp sums at 64 threads a row (two tiles alternate)
  float handoff_rows[kHandoffRows];      // the CTA's outputs where it hands y's norm on
  alignas(128) uint8_t tiles[1];         // stages × tile bytes
};

// What a launch's tiles are: rows per tile (output rows; SwiGLU's tiles hold
// as many up rows after them), bytes of a row and of a tile, stages, the
// tiles asked for before the PDL wait, and how CTAs walk the tiles.
struct Plan {
  int rows;
  uint32_t row_bytes, tile_bytes;
  int stages;
  int64_t tiles;
  int early_tiles;
  bool evict_first;  // the weights' lines go first out of L2 (stream::weights_evict_first)
  // 0: CTA c takes tiles c, c + grid, ... (the load is even to a tile);
  // else CTA c takes this many consecutive tiles, kHandoffRows rows.
  int tiles_per_cta;
};

// (Computed once per launch on the host and passed to the kernel.)
template <class Chunk, int kRowThreads, bool kSwiglu>
Plan plan_of(const GemvArgs& a, const StreamFusions& f) {
  constexpr int kRows = Chunk::kConsumerThreads / kRowThreads / (kSwiglu ? 2 : 1);
  const uint32_t row_bytes = uint32_t(a.k / kChunkValues * Chunk::kChunkBytes);
  const uint32_t tile_bytes = row_bytes * kRows * (kSwiglu ? 2 : 1);
  const int stages = int(std::min<int64_t>(kMaxStages, kSmBudget / Chunk::kCtasPerSm / tile_bytes));
  // BRIOCHE_CUDA_GEMV_EARLY_TILES=0: the whole ring before the wait (A/B runs).
  static const bool few_early = env_switch_on("BRIOCHE_CUDA_GEMV_EARLY_TILES");
  constexpr EarlyTiles e = Chunk::kEarly;
  const int early = kSwiglu                             ? e.swiglu
                    : a.k / kChunkValues > kShortChunks ? e.long_k
                    : a.accumulate                      ? e.short_accumulating
                                                        : e.short_k;
  static_assert(kHandoffRows % kRows == 0 || kSwiglu);
  return {kRows,
          row_bytes,
          tile_bytes,
          stages,
          (a.m + kRows - 1) / kRows,
          few_early ? early : stages,
          stream::weights_evict_first(),
          f.normed_out.norm_w != nullptr ? kHandoffRows / kRows : 0};
}

// The tiles CTA blockIdx.x takes: first, first + step, ... below end.
struct TileWalk {
  int first, end, step;
};
__device__ __forceinline__ TileWalk tile_walk(const Plan& p) {
  if (p.tiles_per_cta == 0) return {int(blockIdx.x), int(p.tiles), int(gridDim.x)};
  const int first = int(blockIdx.x) * p.tiles_per_cta;
  return {first, min(int(p.tiles), first + p.tiles_per_cta), 1};
}

// The producer: tile t's rows into a slot, one bulk copy per run of rows
// that are contiguous in global memory; the first p.early_tiles before the
// PDL wait (EarlyTiles above), the rest after it.
template <class Chunk, int kRowThreads, bool kSwiglu>
__device__ void produce(const GemvArgs& a, Shared& s, const Plan& p) {
  RingPosition at(p.stages);
  int asked = 0;
  const stream::WeightCopier copy(p.evict_first);
  const TileWalk walk = tile_walk(p);
  for (int64_t t = walk.first; t < walk.end; t += walk.step, at.advance()) {
    if (asked++ == p.early_tiles) asm volatile("griddepcontrol.wait;" ::: "memory");
    const int rows = int(std::min<int64_t>(p.rows, a.m - t * p.rows));
    const uint32_t full = shared_address(&s.full[at.slot]);
    barrier_wait(shared_address(&s.empty[at.slot]), at.parity ^ 1);
    barrier_arrive_expect(full, p.row_bytes * rows * (kSwiglu ? 2 : 1));
    uint8_t* tile = s.tiles + size_t(at.slot) * p.tile_bytes;
    for (int half = 0; half < (kSwiglu ? 2 : 1); ++half) {
      const uint8_t* run = nullptr;
      uint32_t run_bytes = 0, run_dst = 0;
      for (int i = 0; i < rows; ++i) {
        const GemvTarget g = gemv_target(a, t * p.rows + i);
        const uint8_t* src = half == 0 ? g.w : g.w_up;
        if (run != nullptr && src == run + run_bytes) {
          run_bytes += p.row_bytes;
          continue;
        }
        if (run != nullptr) copy(run_dst, run, run_bytes, full);
        run = src;
        run_bytes = p.row_bytes;
        run_dst = shared_address(tile + (size_t(half) * p.rows + i) * p.row_bytes);
      }
      copy(run_dst, run, run_bytes, full);
    }
  }
}

// Where launch row `row` writes: gemv_target's y, walked in 32-bit
// arithmetic (a launch has fewer than 2^31 rows). The consumers'
// instructions are on the decode's time (docs/perf-log/cuda-decode.md#consumer-arithmetic): with
// 32-bit rows, tiles and slot addresses Q4_0's loop is 301 → 280
// instructions (SASS), and 8B decode run ahead went Q4_0 582.4–582.5 →
// 586.4–587.7 tokens/s, Q4_K 561.3–562.4 → 564.0–565.9 (A/B, one call).
__device__ __forceinline__ float* row_output(const GemvArgs& a, int launch_row) {
  const auto [p, row] = part_of_row(a, launch_row);
  return p->y + row;
}

// r = (Σ_b sums[b] / k + eps)^(−1/2) for x as a launch handing its norm on
// wrote it (NormedOut): the same bits in every warp, which add the k/32
// sums in one order.
__device__ __forceinline__ float handed_norm_scale(const float* sums, int64_t k, float eps) {
  const int lane = threadIdx.x % 32;
  float sq = 0.0f;
  for (int b = lane; b < int(k / 32); b += 32) sq += sums[b];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, off);
  return rsqrtf(sq / float(k) + eps);
}

// The end of a launch that hands y's norm on: once every consumer has put
// its rows' sums in s.handoff_rows, warp 0 (lane i: row first_row + i, whose
// old y and norm weight it loaded) stores y += sum, then the block's
// y ⊙ norm_w quantized and Σ y² (NormedOut).
template <int kConsumerThreads>
__device__ void hand_norm_on(const GemvArgs& a, const NormedOut& out, const Shared& s, int first_row, float y_old,
                             float norm_w) {
  asm volatile("bar.sync %0, %1;" ::"n"(kHandoffBarrier), "n"(kConsumerThreads) : "memory");
  if (threadIdx.x >= 32) return;
  const float y = y_old + s.handoff_rows[threadIdx.x];
  *row_output(a, first_row + int(threadIdx.x)) = y;
  const int block = first_row / kHandoffRows;
  quantize_block_of_warp(y * norm_w, out.q + first_row, out.ds + block);
  float sq = y * y;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, off);
  if (threadIdx.x == 0) out.sum_sq[block] = sq;
}

// A consumer thread: row `r` of each tile (SwiGLU: gate row r of the lower
// half-warp, up row r of the upper), columns of part `part` (a chunk, or half
// of one: rows of 32 threads, never a row over two warps nor SwiGLU).
template <class Chunk, int kRowThreads, bool kSwiglu>
__device__ void consume(const GemvArgs& a, const Int8Acts& x, const StreamFusions& f, Shared& s, const Plan& p) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // The thread's row within the tile: SwiGLU's half-warps take gate row
  // `warp` and the up row after the tile's gate rows.
  const int slot_row = kSwiglu ? warp + (lane / 16) * p.rows : threadIdx.x / kRowThreads;
  static_assert(Chunk::kSplit == 1 || (kRowThreads == 32 && !kSwiglu));
  const int part = threadIdx.x % kRowThreads;
  const bool active = part < a.k / Chunk::kPartValues;
  typename Chunk::X xc{};
  if (active) xc = load_x_part<Chunk::kPartValues>(x, part);
  // The thread that stores the row here (SwiGLU's are the lanes 0 below);
  // gemv_store adds to y where the launch accumulates.
  const bool stores = !kSwiglu && (kRowThreads == 64 ? threadIdx.x % 64 == 0 : part == 0);
  const int m = int(a.m);
  // x as a launch handing its norm on wrote it: each output times r.
  const float r = f.x_sum_sq != nullptr ? handed_norm_scale(f.x_sum_sq, a.k, a.norm_eps) : 1.0f;
  // Handing y's norm on (p.tiles_per_cta): the CTA's 32 rows end in
  // s.handoff_rows; warp 0 loads their old y and norm weight now, while the
  // first tiles arrive.
  const bool hands_on = p.tiles_per_cta != 0;
  const int first_row = int(blockIdx.x) * kHandoffRows;
  float y_old = 0.0f, norm_w = 0.0f;
  if (hands_on && warp == 0) {
    y_old = *row_output(a, first_row + lane);
    norm_w = f.normed_out.norm_w[first_row + lane];
  }
  // Slot i's barriers: full0 and empty0 plus i barriers' bytes.
  const uint32_t full0 = shared_address(&s.full[0]), empty0 = shared_address(&s.empty[0]);
  constexpr uint32_t kBarrierBytes = sizeof(uint64_t);
  const uint8_t* my_row = s.tiles + slot_row * p.row_bytes;
  RingPosition at(p.stages);
  uint32_t buffer = 0;
  const TileWalk walk = tile_walk(p);
  for (int t = walk.first; t < walk.end; t += walk.step, buffer ^= 1) {
    const int row = t * p.rows + slot_row;
    barrier_wait(full0 + kBarrierBytes * at.slot, at.parity);
    uint32_t v[Chunk::kWords];
    if (active) Chunk::load(my_row + at.slot * p.tile_bytes, part, v);
    float sum = 0.0f;
    if constexpr (!Chunk::kReleaseBeforeDot) sum = active ? Chunk::dot(v, xc, part) : 0.0f;
    // (The arrival orders the thread's loads of the slot before it.)
    barrier_arrive(empty0 + kBarrierBytes * at.slot);
    at.advance();
    if constexpr (Chunk::kReleaseBeforeDot) sum = active ? Chunk::dot(v, xc, part) : 0.0f;
      // Σ over the row's threads.
#pragma unroll
    for (int off = (kRowThreads < 32 ? kRowThreads : 32) / 2; off > 0; off >>= 1)
      sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if constexpr (kSwiglu) {
      static_assert(kRowThreads == 16);
      const float up = __shfl_sync(0xffffffffu, sum, 16);
      const int gate_row = t * p.rows + warp;
      if (lane == 0 && gate_row < m) gemv_store<true>(a, {.y = row_output(a, gate_row)}, 0, sum * r, up * r);
      continue;
    }
    if constexpr (kRowThreads == 64) {
      if (lane == 0) s.partials[buffer][warp] = sum;
      asm volatile("bar.sync %0, 64;" ::"r"(kRowPairBarrier + warp / 2) : "memory");
      if (stores) sum += s.partials[buffer][warp + 1];
    }
    if (stores && row < m) {
      if (hands_on)
        s.handoff_rows[row - first_row] = sum * r;
      else
        gemv_store<false>(a, {.y = row_output(a, row)}, 0, sum * r, 0.0f);
    }
  }
  if (hands_on) hand_norm_on<Chunk::kConsumerThreads>(a, f.normed_out, s, first_row, y_old, norm_w);
}

template <class Chunk, int kRowThreads, bool kSwiglu>
__global__ void __launch_bounds__(Chunk::kThreads, Chunk::kCtasPerSm)
    gemv_stream_rows_kernel(GemvArgs a, Int8Acts x, StreamFusions f, Plan p) {
  constexpr int kConsumerThreads = Chunk::kConsumerThreads;
  extern __shared__ __align__(128) uint8_t shared[];
  auto& s = *reinterpret_cast<Shared*>(shared);
  stream::init_ring(s.full, s.empty, p.stages, kConsumerThreads);
  __syncthreads();
  if (threadIdx.x >= kConsumerThreads) {
    // Weights only: the producer's wait paces its requests, nothing it reads
    // needs it (gemv_stream.cuh).
    if (threadIdx.x == kConsumerThreads) produce<Chunk, kRowThreads, kSwiglu>(a, s, p);
    return;
  }
  pdl_prologue();
  consume<Chunk, kRowThreads, kSwiglu>(a, x, f, s, p);
}

template <class Chunk, int kRowThreads, bool kSwiglu>
void launch(const GemvArgs& a, const Int8Acts& x, const StreamFusions& f) {
  const Plan p = plan_of<Chunk, kRowThreads, kSwiglu>(a, f);
  const size_t smem = offsetof(Shared, tiles) + size_t(p.stages) * p.tile_bytes;
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(gemv_stream_rows_kernel<Chunk, kRowThreads, kSwiglu>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(offsetof(Shared, tiles)) + kSmBudget / Chunk::kCtasPerSm));
    return true;
  }();
  (void)configured;
  const int64_t ctas = int64_t(Chunk::kCtasPerSm) * multiprocessor_count();
  const unsigned grid = p.tiles_per_cta != 0 ? unsigned((p.tiles + p.tiles_per_cta - 1) / p.tiles_per_cta)
                                             : unsigned(std::min<int64_t>(p.tiles, ctas));
  launch_dependent(gemv_stream_rows_kernel<Chunk, kRowThreads, kSwiglu>, grid, Chunk::kThreads, smem, a, x, f, p);
}

// Threads a row: 16, 32 or 64, one a chunk. The launches of at most
// kShortChunks chunks without SwiGLU may split their chunks (kSplit): Short is the chunk
// type of those that write y (Q/K/V, the lm_head), ShortAccumulating of
// those that add to it (O); Swiglu is gate/up's (Q4_0's gives its slot
// back early).
template <class Chunk, class Short = Chunk, class ShortAccumulating = Short, class Swiglu = Chunk>
void launch_chunks(const GemvArgs& a, const Int8Acts& x, const StreamFusions& f) {
  const int64_t chunks = a.k / kChunkValues;
  if (a.w_up != nullptr) return launch<Swiglu, 16, true>(a, x, f);
  if (f.normed_out.norm_w != nullptr) {
    using Short8 = EightWarps<ShortAccumulating>;
    if (chunks <= kShortChunks) return launch<Short8, 16 * Short8::kSplit, false>(a, x, f);
    if (chunks <= 32) return launch<EightWarps<Chunk>, 32, false>(a, x, f);
    return launch<EightWarps<Chunk>, 64, false>(a, x, f);
  }
  if (chunks <= kShortChunks && a.accumulate)
    return launch<ShortAccumulating, 16 * ShortAccumulating::kSplit, false>(a, x, f);
  if (chunks <= kShortChunks) return launch<Short, 16 * Short::kSplit, false>(a, x, f);
  if (chunks <= 32) return launch<Chunk, 32, false>(a, x, f);
  launch<Chunk, 64, false>(a, x, f);
}

}  // namespace

bool gemv_stream_rows_takes(DType wtype, const GemvArgs& a) {
  static const bool on = env_switch_on("BRIOCHE_CUDA_GEMV_STREAM_INT8");
  const bool typed = wtype == DType::Q8_0 || wtype == DType::Q4_0 || wtype == DType::Q4_K || wtype == DType::Q5_K ||
                     (wtype == DType::Q6_K && a.k % 2048 == 0) ||  // (Q6_K: 16-byte aligned rows)
                     affine_bits(wtype) != 0;
  if (!on || !typed || !stream::weights_fit(a)) return false;  // (x: the int8 scratch)
  const int64_t max_chunks = a.w_up != nullptr ? kShortChunks : 64;
  if (a.k % kChunkValues != 0 || a.k / kChunkValues > max_chunks) return false;
  // Packed rows: the tile's row stride is the row's bytes.
  for (int p = 0; p < a.n_parts; ++p)
    if (a.parts[p].w_row_bytes != row_bytes(wtype, a.k)) return false;
  return true;
}

bool gemv_stream_rows_hands_on(DType wtype, const GemvArgs& a) {
  const bool eight_bit = wtype == DType::Q8_0 || affine_bits(wtype) == 8;
  return a.m % kHandoffRows == 0 && !(eight_bit && a.k / kChunkValues > kShortChunks);
}

void gemv_stream_rows(DType wtype, const GemvArgs& a, const Int8Acts& x, const StreamFusions& f) {
  BRIOCHE_CHECK(gemv_stream_rows_takes(wtype, a),
                "gemv_stream_rows: takes one x row of Q8_0/Q4_0/Q4_K/Q5_K/Q6_K/MLX affine "
                "weights of at least ",
                stream::kMinBytes >> 20,
                " MB with k a multiple of 256 (2,048 for Q6_K) up "
                "to 16,384 (4,096 for SwiGLU) and packed 16-byte aligned rows; got ",
                dtype_name(wtype), ", n ", a.n, ", k ", a.k, ", ", gemv_weight_bytes(a), " weight bytes, rows of ",
                a.parts[0].w_row_bytes, " bytes (packed: ", row_bytes(wtype, a.k), ")");
  BRIOCHE_CHECK(
      f.normed_out.norm_w == nullptr || (a.accumulate && a.n_parts == 1 && gemv_stream_rows_hands_on(wtype, a)),
      "gemv_stream_rows: a launch handing y's norm on adds to one y of rows a multiple of ", kHandoffRows,
      " (not an 8-bit type's down); got ", a.m, " rows of ", dtype_name(wtype), ", k ", a.k, ", ", a.n_parts,
      " part(s)", a.accumulate ? "" : ", not accumulating");
  switch (wtype) {
    // (Split chunks: ChunkOf's kSplit.)
    case DType::Q8_0: return launch_chunks<Q8_0Chunk<>, Q8_0Chunk<>, Q8_0Chunk<2>>(a, x, f);
    case DType::Q4_0: return launch_chunks<Q4_0Chunk<>, Q4_0Chunk<>, Q4_0Chunk<2>, Q4_0Chunk<1, true>>(a, x, f);
    case DType::Q4_K: return launch_chunks<Q4_KChunk<>, Q4_KShort, Q4_KChunk<2>>(a, x, f);
    case DType::Q5_K: return launch_chunks<Q5_KChunk>(a, x, f);
    case DType::Q6_K: return launch_chunks<Q6_KChunk>(a, x, f);
    case DType::AFFINE4_G32: return launch_chunks<AffineChunk<4, 32>>(a, x, f);
    case DType::AFFINE4_G64: return launch_chunks<AffineChunk<4, 64>>(a, x, f);
    case DType::AFFINE4_G128: return launch_chunks<AffineChunk<4, 128>>(a, x, f);
    case DType::AFFINE8_G32: return launch_chunks<AffineChunk<8, 32>>(a, x, f);
    case DType::AFFINE8_G64: return launch_chunks<AffineChunk<8, 64>>(a, x, f);
    default: return launch_chunks<AffineChunk<8, 128>>(a, x, f);
  }
}

}  // namespace brioche::cuda::detail
