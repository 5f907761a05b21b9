// The streamed decode GEMV for Q8_0, Q4_0, Q4_K, Q5_K, Q6_K and MLX affine weights
// against int8 x (gemv_int8.cuh): tiles of whole weight rows brought into
// shared memory by the bulk copy engine (the pipeline of gemv_stream.cuh),
// read by consumer threads that each own a fixed 256-value column chunk (one
// K-quant super-block: 144, 176 or 210 bytes), or half of one (ChunkRun:
// split).
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
// threads share a chunk: ChunkRun's split); the type's tuning says how many CTAs
// share an SM (and its 200 KB of tile slots). What each weight type runs at
// each launch position is one table (TypeTuning, below); its measurements are
// in docs/perf-log/cuda-decode.md#gemv-stream-rows-tuning.
// BRIOCHE_CUDA_GEMV_STREAM_INT8=0 keeps the warp kernels of gemv_int8.cuh,
// for A/B runs.
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
// super-block than decoding and converting per group
// (docs/perf-log/cuda-decode.md#consumer-arithmetic).
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

// How a weight type's chunks run at one launch position: what the kernel is
// compiled with (the positions of a type with equal runs share a kernel).
//   ctas_per_sm: CTAs sharing an SM and its kSmBudget of tile slots (a
//     type's, at every position). More CTAs keep more tiles in flight for
//     small chunks; Q8_0's chunks are twice Q4_0's bytes.
//   split: threads a chunk, 1 or 2. Each thread's tile row is one dependent
//     chain of shared loads and __dp4a, which is on the decode's time in a
//     short GEMV's ramp and tail. Two threads a chunk, 128 values each (a
//     part: X; a half chunk of Q8_0 or Q4_0 is 136 or 72 bytes, read as
//     8-byte loads), halve it, with 8 consumer warps a CTA, rows of 32
//     threads and the tile unchanged. It pays only in the short launches
//     without SwiGLU: where a row spans warps (down, or SwiGLU's gate and up
//     rows) the sums' exchange through shared memory every tile costs more
//     than the halved chain saves, and split Q/K/V CTAs of Q4_0 and Q8_0
//     leave no room beside them for the attention's.
//   release_before_dot: a thread gives its tile slot back to the producer
//     once its share is in registers, before the arithmetic: the next copy
//     is asked for that much earlier, for ~30 more registers a thread (so
//     fewer CTAs fit beside the attention's).
struct ChunkRun {
  int ctas_per_sm = 1;
  int split = 1;
  bool release_before_dot = false;
};

// One launch position's tuning: its run, and the tiles the producer asks for
// before its PDL wait. The kernel before a GEMV is a short one (a norm, an x
// quantization, the attention), bound by L2 round trips; tiles the GEMV's
// producers ask for before their PDL wait are requests that those round
// trips queue behind (a whole ring per CTA, ~20–26 MB over the GPU, doubled
// the x quantization between gate/up and down). So a producer asks for a
// few tiles first, waits for the kernel before as the consumers do, then
// fills the rest of its ring. None at all loses too: HBM then idles during
// the kernel before. BRIOCHE_CUDA_GEMV_EARLY_TILES=0 asks for the whole
// ring first (A/B runs).
struct PositionTuning {
  int split = 1;
  bool release_before_dot = false;
  int early_tiles = 1;
};

// A weight type's tuning at each launch position of a decode step.
struct TypeTuning {
  int ctas_per_sm;
  PositionTuning qkv;      // k ≤ 4,096 writing y: Q/K/V, the lm_head
  PositionTuning o;        // k ≤ 4,096 adding to y: O (and a launch handing y's norm on)
  PositionTuning gate_up;  // SwiGLU's gate and up (k ≤ 4,096)
  PositionTuning down;     // k > 4,096: down, and any longer launch

  constexpr ChunkRun run(const PositionTuning& at) const {
    return {.ctas_per_sm = ctas_per_sm, .split = at.split, .release_before_dot = at.release_before_dot};
  }
};

// The same tuning at every position.
constexpr TypeTuning uniform_tuning(int ctas_per_sm, int early_tiles) {
  const PositionTuning at{.early_tiles = early_tiles};
  return {.ctas_per_sm = ctas_per_sm, .qkv = at, .o = at, .gate_up = at, .down = at};
}

// The tables, chosen by A/B runs of Llama-3-8B decode (one run per entry
// and its alternatives: docs/perf-log/cuda-decode.md#gemv-stream-rows-tuning,
// which links each measurement).
//
// Q8_0: one CTA per SM (its 272-byte chunks: 5 tiles of 8 rows in flight at
// k = 4,096); O split. Three tiles first (tiles of twice Q4_0's bytes), 2 at
// O and 4 at down, which add to y with red.add and so wait on less.
constexpr TypeTuning kQ8_0Tuning{.ctas_per_sm = 1,
                                 .qkv = {.early_tiles = 3},
                                 .o = {.split = 2, .early_tiles = 2},
                                 .gate_up = {.early_tiles = 3},
                                 .down = {.early_tiles = 4}};
// Q4_0: two CTAs per SM (8 consumer warps, 5 tiles each in flight); O
// split; gate/up releases its slot early. One tile first; two at gate/up
// (the kernel before is the norm) and down (its weights leave L2 first:
// stream::weights_evict_first).
constexpr TypeTuning kQ4_0Tuning{.ctas_per_sm = 2,
                                 .qkv = {.early_tiles = 1},
                                 .o = {.split = 2, .early_tiles = 1},
                                 .gate_up = {.release_before_dot = true, .early_tiles = 2},
                                 .down = {.early_tiles = 2}};
// Q4_K: two CTAs per SM, as Q4_0 (the same 144 bytes a chunk), releasing
// slots early, O split. Q/K/V and the lm_head take Q4_0's configuration
// (one thread a chunk, no early release, one tile first): two such CTAs hold
// Q4_0's share of an SM's registers (ptxas: 126 a thread at 160 threads,
// 40,960 a pair, against 90 at 288 and 55,296 split), which leaves an
// attention CTA room beside them before they end (docs/cuda.md, "share SMs
// by registers"); unsplit with the early release it lost.
constexpr TypeTuning kQ4_KTuning{.ctas_per_sm = 2,
                                 .qkv = {.early_tiles = 1},
                                 .o = {.split = 2, .release_before_dot = true, .early_tiles = 2},
                                 .gate_up = {.release_before_dot = true, .early_tiles = 2},
                                 .down = {.release_before_dot = true, .early_tiles = 2}};
// Q5_K, Q6_K: as Q4_K without the splits and early releases (at par or
// slower measured).
constexpr TypeTuning kQ5_KTuning = uniform_tuning(2, 2);
constexpr TypeTuning kQ6_KTuning = uniform_tuning(2, 2);
// MLX affine: CTAs per SM and tiles first as the GGUF type of the same bits
// (Q4_0, Q8_0); not Q4_0's second gate/up and down tiles, nor the splits,
// which were measured on the GGUF types alone.
constexpr TypeTuning kAffine4Tuning = uniform_tuning(2, 1);
constexpr TypeTuning kAffine8Tuning = uniform_tuning(1, 3);

// What a chunk format's kernel reads of its run, and how a thread loads its
// part of a tile row.
template <int kChunkBytes_, ChunkRun kRun>
struct ChunkOf {
  static constexpr int kChunkBytes = kChunkBytes_;
  static constexpr int kSplit = kRun.split, kPartValues = kChunkValues / kSplit, kPartBytes = kChunkBytes / kSplit;
  static constexpr int kWords = (kPartBytes + 3) / 4;
  static constexpr int kCtasPerSm = kRun.ctas_per_sm;
  static constexpr bool kReleaseBeforeDot = kRun.release_before_dot;
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
template <ChunkRun kRun>
struct Q8_0Chunk : ChunkOf<8 * 34, kRun> {
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
template <ChunkRun kRun>
struct Q4_0Chunk : ChunkOf<8 * 18, kRun> {
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
// Split (ChunkRun's split 2), a thread's half super-block is the header
// (words 0..3) and the 64 quant bytes of groups 2·half and 2·half + 1
// (words 4..19).
template <ChunkRun kRun>
struct Q4_KChunk : ChunkOf<144, kRun> {
  using Base = Q4_KChunk::ChunkOf;
  using typename Base::X;
  static constexpr int kSplit = Base::kSplit;
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

// Q5_K: as Q4_K with qh[32] (words 4..11) before qs (words 12..43): bit j of
// qh[i] is the fifth bit of element i of sub-block j.
template <ChunkRun kRun>
struct Q5_KChunk : ChunkOf<176, kRun> {
  static_assert(kRun.split == 1, "Q5_K's dot reads whole super-blocks");
  using Base = Q5_KChunk::ChunkOf;
  using Base::kWords;
  using typename Base::X;
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
template <ChunkRun kRun>
struct Q6_KChunk : ChunkOf<210, kRun> {
  static_assert(kRun.split == 1, "Q6_K's load and dot read whole super-blocks");
  using Base = Q6_KChunk::ChunkOf;
  using Base::kChunkBytes;
  using Base::kWords;
  using typename Base::X;
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
// (gemv_int8.cuh: affine8_centered, affine4_in_order, affine_offset).
template <int kBits, int kGroup, ChunkRun kRun>
using AffineChunkOf = ChunkOf<(256 / kGroup) * (8 + kGroup * kBits / 8), kRun>;
template <int kBits, int kGroup, ChunkRun kRun>
struct AffineChunk : AffineChunkOf<kBits, kGroup, kRun> {
  static_assert(kRun.split == 1, "the affine dot reads whole chunks");
  using AffineChunkOf<kBits, kGroup, kRun>::kWords;
  using typename AffineChunkOf<kBits, kGroup, kRun>::X;
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
// The affine formats, one chunk type each (as template arguments of launch_chunks).
template <ChunkRun kRun>
using Affine4G32Chunk = AffineChunk<4, 32, kRun>;
template <ChunkRun kRun>
using Affine4G64Chunk = AffineChunk<4, 64, kRun>;
template <ChunkRun kRun>
using Affine4G128Chunk = AffineChunk<4, 128, kRun>;
template <ChunkRun kRun>
using Affine8G32Chunk = AffineChunk<8, 32, kRun>;
template <ChunkRun kRun>
using Affine8G64Chunk = AffineChunk<8, 64, kRun>;
template <ChunkRun kRun>
using Affine8G128Chunk = AffineChunk<8, 128, kRun>;

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
// `early_tiles`: the launch position's (PositionTuning).
template <class Chunk, int kRowThreads, bool kSwiglu>
Plan plan_of(const GemvArgs& a, const StreamFusions& f, int early_tiles) {
  constexpr int kRows = Chunk::kConsumerThreads / kRowThreads / (kSwiglu ? 2 : 1);
  const uint32_t row_bytes = uint32_t(a.k / kChunkValues * Chunk::kChunkBytes);
  const uint32_t tile_bytes = row_bytes * kRows * (kSwiglu ? 2 : 1);
  const int stages = int(std::min<int64_t>(kMaxStages, kSmBudget / Chunk::kCtasPerSm / tile_bytes));
  // BRIOCHE_CUDA_GEMV_EARLY_TILES=0: the whole ring before the wait (A/B runs).
  static const bool few_early = env_switch_on("BRIOCHE_CUDA_GEMV_EARLY_TILES");
  static_assert(kHandoffRows % kRows == 0 || kSwiglu);
  return {kRows,
          row_bytes,
          tile_bytes,
          stages,
          (a.m + kRows - 1) / kRows,
          few_early ? early_tiles : stages,
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
// PDL wait (PositionTuning above), the rest after it.
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
// arithmetic (a launch has fewer than 2^31 rows): the consumers'
// instructions are on the decode's time, and with 32-bit rows, tiles and
// slot addresses Q4_0's loop is 301 → 280 instructions (SASS;
// docs/perf-log/cuda-decode.md#consumer-arithmetic).
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
void launch(const GemvArgs& a, const Int8Acts& x, const StreamFusions& f, int early_tiles) {
  const Plan p = plan_of<Chunk, kRowThreads, kSwiglu>(a, f, early_tiles);
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

// Threads a row: 16, 32 or 64, one a chunk (two where the position splits
// its chunks, only in launches of at most kShortChunks chunks without
// SwiGLU). Each launch takes its position's row of the type's table.
template <template <ChunkRun> class Format, TypeTuning kTuning>
void launch_chunks(const GemvArgs& a, const Int8Acts& x, const StreamFusions& f) {
  using Qkv = Format<kTuning.run(kTuning.qkv)>;
  using O = Format<kTuning.run(kTuning.o)>;
  using GateUp = Format<kTuning.run(kTuning.gate_up)>;
  using Down = Format<kTuning.run(kTuning.down)>;
  const int64_t chunks = a.k / kChunkValues;
  if (a.w_up != nullptr) return launch<GateUp, 16, true>(a, x, f, kTuning.gate_up.early_tiles);
  if (f.normed_out.norm_w != nullptr) {  // (adds to y: O, or down of a 4-bit type)
    using O8 = EightWarps<O>;
    if (chunks <= kShortChunks) return launch<O8, 16 * O8::kSplit, false>(a, x, f, kTuning.o.early_tiles);
    if (chunks <= 32) return launch<EightWarps<Down>, 32, false>(a, x, f, kTuning.down.early_tiles);
    return launch<EightWarps<Down>, 64, false>(a, x, f, kTuning.down.early_tiles);
  }
  if (chunks <= kShortChunks && a.accumulate) return launch<O, 16 * O::kSplit, false>(a, x, f, kTuning.o.early_tiles);
  if (chunks <= kShortChunks) return launch<Qkv, 16 * Qkv::kSplit, false>(a, x, f, kTuning.qkv.early_tiles);
  if (chunks <= 32) return launch<Down, 32, false>(a, x, f, kTuning.down.early_tiles);
  launch<Down, 64, false>(a, x, f, kTuning.down.early_tiles);
}

}  // namespace

bool gemv_stream_rows_takes(DType wtype, const GemvArgs& a) {
  static const bool on = env_switch_on("BRIOCHE_CUDA_GEMV_STREAM_INT8");
  const bool typed = wtype == DType::Q8_0 || wtype == DType::Q4_0 || wtype == DType::Q4_K || wtype == DType::Q5_K ||
                     (wtype == DType::Q6_K && a.k % 2048 == 0) ||  // (Q6_K: 16-byte aligned rows)
                     affine_bits(wtype) != 0;
  if (!on || !typed || a.n != 1 || !stream::weights_fit(a)) return false;  // (x: the int8 scratch)
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
    case DType::Q8_0: return launch_chunks<Q8_0Chunk, kQ8_0Tuning>(a, x, f);
    case DType::Q4_0: return launch_chunks<Q4_0Chunk, kQ4_0Tuning>(a, x, f);
    case DType::Q4_K: return launch_chunks<Q4_KChunk, kQ4_KTuning>(a, x, f);
    case DType::Q5_K: return launch_chunks<Q5_KChunk, kQ5_KTuning>(a, x, f);
    case DType::Q6_K: return launch_chunks<Q6_KChunk, kQ6_KTuning>(a, x, f);
    case DType::AFFINE4_G32: return launch_chunks<Affine4G32Chunk, kAffine4Tuning>(a, x, f);
    case DType::AFFINE4_G64: return launch_chunks<Affine4G64Chunk, kAffine4Tuning>(a, x, f);
    case DType::AFFINE4_G128: return launch_chunks<Affine4G128Chunk, kAffine4Tuning>(a, x, f);
    case DType::AFFINE8_G32: return launch_chunks<Affine8G32Chunk, kAffine8Tuning>(a, x, f);
    case DType::AFFINE8_G64: return launch_chunks<Affine8G64Chunk, kAffine8Tuning>(a, x, f);
    default: return launch_chunks<Affine8G128Chunk, kAffine8Tuning>(a, x, f);
  }
}

}  // namespace brioche::cuda::detail
