// The streamed decode GEMV: 1..8 x rows against weights of many MB, the weight
// tiles brought into shared memory by the bulk copy engine several tiles
// ahead of the arithmetic. This is its pipeline; gemv_stream.cu has the tiles
// of bf16/f16 weights.
//
// Why: the warp-per-row kernel (gemv_dense.cu) holds a warp's loads in
// registers, a few 16-byte loads per lane in flight, and their
// occupancy is capped by registers. On the 8B shape its big bf16 launches
// streamed at 3.0-3.5 TB/s of the 4.5 the H200 reads at: down_proj (4,096
// rows of 28 KB, one wave) the slowest at 3.0, each warp waiting out a full
// memory latency per 2 KB. Here one thread per CTA asks the copy engine for
// whole tiles (8 rows × 2,048 values), ~128 KB of them ahead, no registers
// held, and the first tiles are read before the kernel's PDL wait, while
// the kernel before it runs.
//
// The layout: a persistent grid (one CTA per SM) walks groups of 8 weight
// rows (4 output rows for SwiGLU: 4 gate and 4 up rows); a group's rows
// come in tiles of 2,048 values. A CTA has 8 consumer warps and one producer
// warp. Each consumer thread owns a few columns of the tile: it reads their
// x values once and multiplies them into all 8 rows (the warp-per-row
// kernels read x once per row). At the end of a group the 256 partial sums
// of each row are reduced through the warps and shared memory.
//
// Pipeline: tile slots in a ring; full[s] completes when the copy engine has
// written slot s (mbarrier transaction count), empty[s] when every consumer
// thread has read it. Phases alternate each lap of the ring (parity waits).
//
// A Tile type says how a weight type is read:
//   kRowBytes             bytes of kTileCols values of a row
//   row_bytes(cols)       bytes of `cols` values (a partial last tile)
//   Acts                  what x is read from
//   load_x(x, k, col0)    this thread's share of x for the tile of columns
//                         col0.. (k columns in all): an XShare, read before
//                         the wait for the tile
//   accumulate(tile, xs, acc)
//                         acc[i] += this thread's share of tile row i · xs
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/mbarrier.cuh"
#include "backend/cuda/row_norm.cuh"
#include "backend/cuda/runtime.h"
#include "core/env_switch.h"

namespace brioche::cuda::detail::stream {

inline constexpr int kConsumerWarps = 8;
inline constexpr int kConsumerThreads = kConsumerWarps * 32;
inline constexpr int kThreads = kConsumerThreads + 32;  // the last warp produces
inline constexpr int kTileCols = 2048;
inline constexpr int kTileRows = 8;  // weight rows per tile
// Shared memory for tiles in flight per CTA, one CTA per SM: ≈ 17 MB over
// the H200's 132 SMs, ~4 µs of HBM time. Llama-3-8B bf16 decode (32 KB
// tiles): 2 slots 208 tokens/s, 3: 217, 4: 236; 5 and 6: no better, nor two
// CTAs per SM of 3 slots each.
inline constexpr int kTileBudget = 128 << 10;
// x̂ of up to this many values when the kernel takes the norm
// (rms_norm_threads(k) = 256).
inline constexpr int kMaxNormedK = 4 * kRmsNormVec * kConsumerThreads;

// Output rows per group: 8, or 4 gate rows and their 4 up rows.
template <bool kSwiglu>
inline constexpr int kGroupRows = kSwiglu ? kTileRows / 2 : kTileRows;

// What the producers' bulk copies read, weights, is read once a decode step,
// while a step's activations (each GEMV's outputs, the residual, the K/V
// cache) are written and read again within microseconds. Under L2's plain
// replacement a GEMV streaming 60–125 MB through the 50 MB L2 evicted the
// outputs it had written before the next kernel read them, so those small
// kernels (norms, x quantizations, the attention), each a chain of L2 round
// trips, went to HBM. Copied under an evict_first policy the weights' lines
// are the ones L2 replaces first, and every kernel of the layer gets faster
// (docs/perf-log/cuda-decode.md#weights-evict-first has the A/B).
// BRIOCHE_CUDA_L2_EVICT_FIRST=0 copies them under the default policy (A/B
// runs); the producers take the choice as a kernel argument.
inline bool weights_evict_first() {
  static const bool on = env_switch_on("BRIOCHE_CUDA_L2_EVICT_FIRST");
  return on;
}

#ifdef __CUDACC__
// ---- bulk copy (PTX ISA: "cp.async.bulk"; the barriers: mbarrier.cuh)

// `bytes` (a multiple of 16, both ends 16-byte aligned) from global to
// shared memory by the copy engine, completing on `bar`.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// bulk_copy, under an L2 policy under which the lines read go first
// (evict_first), or under the default policy.
struct WeightCopier {
  bool evict_first;
  uint64_t policy = 0;
  __device__ explicit WeightCopier(bool first) : evict_first(first) {
    if (first) policy = evict_first_policy();
  }
  __device__ void operator()(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) const {
    if (!evict_first) return bulk_copy(dst, src, bytes, bar);
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
        "%4;" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(policy)
        : "memory");
  }
};

// The dynamic shared memory; `normed` only where the kernel takes the norm
// (the launch's size ends before it otherwise).
template <int kRowBytes, int kXRows>
struct Shared {
  static constexpr int kStages = std::clamp(kTileBudget / (kTileRows * kRowBytes), 2, 16);
  uint8_t tiles[kStages][kTileRows][kRowBytes];
  uint64_t full[kStages];   // the copy engine has written the slot
  uint64_t empty[kStages];  // every consumer thread has read it
  // A group's warp sums per x row (two groups alternate).
  float partials[2][kConsumerWarps][kXRows][kTileRows];
  float normed[kMaxNormedK];  // x̂ (one x row)
};

template <class Tile, int kXRows>
using TileShared = Shared<Tile::kRowBytes, kXRows>;

template <class Tile, int kXRows>
constexpr size_t shared_bytes(bool norm) {
  using S = TileShared<Tile, kXRows>;
  return norm ? sizeof(S) : offsetof(S, normed);
}

// A slot of a ring of `stages` slots and the parity of its current lap.
struct RingPosition {
  int stages;
  int slot = 0;
  uint32_t parity = 0;
  __device__ explicit RingPosition(int ring_stages) : stages(ring_stages) {}
  __device__ void advance() {
    if (++slot == stages) {
      slot = 0;
      parity ^= 1;
    }
  }
};

// The ring's barriers, by thread 0 before the CTA's first barrier: full[i]
// completes on the producer's arrival and the copies' bytes, empty[i] on an
// arrival of each of `consumers` threads. The caller then syncs the CTA.
__device__ __forceinline__ void init_ring(uint64_t* full, uint64_t* empty, int stages, int consumers) {
  if (threadIdx.x != 0) return;
  for (int i = 0; i < stages; ++i) {
    barrier_init(shared_address(&full[i]), 1);
    barrier_init(shared_address(&empty[i]), uint32_t(consumers));
  }
  fence_barrier_init();
}

// The producer (one thread): each tile of each of the CTA's groups, into a
// slot once its last reader has released it.
template <class Tile, bool kSwiglu, int kXRows>
__device__ void produce_tiles(const GemvArgs& a, TileShared<Tile, kXRows>& s, bool evict_first) {
  constexpr int kRows = kGroupRows<kSwiglu>;
  const int64_t groups = (a.m + kRows - 1) / kRows, tiles_per_row = (a.k + kTileCols - 1) / kTileCols;
  RingPosition at(TileShared<Tile, kXRows>::kStages);
  const WeightCopier copy(evict_first);
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int rows = int(std::min<int64_t>(kRows, a.m - g * kRows));
    for (int64_t c = 0; c < tiles_per_row; ++c) {
      const int64_t col = c * kTileCols;
      const uint32_t offset = Tile::row_bytes(col), bytes = Tile::row_bytes(std::min<int64_t>(kTileCols, a.k - col));
      const uint32_t full = shared_address(&s.full[at.slot]);
      barrier_wait(shared_address(&s.empty[at.slot]), at.parity ^ 1);
      barrier_arrive_expect(full, bytes * rows * (kSwiglu ? 2 : 1));
      for (int i = 0; i < rows; ++i) {
        const GemvTarget t = gemv_target(a, g * kRows + i);
        copy(shared_address(s.tiles[at.slot][i]), t.w + offset, bytes, full);
        if constexpr (kSwiglu) copy(shared_address(s.tiles[at.slot][kRows + i]), t.w_up + offset, bytes, full);
      }
      at.advance();
    }
  }
}

// Σ over the CTA's 256 consumer threads of each (x row, weight row)'s
// partial, then the stores (threads 0..n·kRows-1, one output each). Every x
// row's sums take the same order, so an output is the same bits whatever
// the launch's n (a speculative verify row equals a one-row decode).
template <bool kSwiglu, int kXRows>
__device__ void reduce_store_group(const GemvArgs& a, float (&partials)[kConsumerWarps][kXRows][kTileRows], int64_t g,
                                   float (&acc)[kXRows][kTileRows]) {
  constexpr int kRows = kGroupRows<kSwiglu>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < kXRows; ++r) {
    if (r >= a.n) break;
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[r][i] += __shfl_xor_sync(0xffffffffu, acc[r][i], off);
      if (lane == 0) partials[warp][r][i] = acc[r][i];
    }
  }
  // Only the consumer warps (barrier 1; barrier 0 is __syncthreads). The
  // partials alternate between two buffers: a group's are read before any
  // thread reaches the next group's barrier, so the group after next may
  // overwrite them.
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumerThreads) : "memory");
  const int r = threadIdx.x / kRows, i = threadIdx.x % kRows;
  const int64_t row = g * kRows + i;
  if (r < a.n && row < a.m) {
    float sum = 0, sum_up = 0;
#pragma unroll
    for (int w = 0; w < kConsumerWarps; ++w) {
      sum += partials[w][r][i];
      if constexpr (kSwiglu) sum_up += partials[w][r][kRows + i];
    }
    gemv_store<kSwiglu>(a, gemv_target(a, row), r, sum, sum_up);
  }
}

// The adapter terms (GemvArgs::lora) in the streamed GEMV, carried by warp
// 0: its lane k holds, for each x row r and part p, u[r, p·rank_cap + k]
// and row k of the part's s·Bᵀ for the row's adapter (null past the
// factors' rank, or for a row without adapter), read once per launch: the
// table before the PDL wait (host copies, like weights), u after it. At the
// start of each group the lane loads its factor values of the group's
// outputs, and at its end, after the tiles, adds u·value into its partial
// sums, which the group's reduction carries into the outputs; so the loads'
// latency hides under the tiles' (a lane reads one row of bt, the warp
// rank of them: the term of output c is Σ_k u[k]·bt[k, c]). Groups lie
// inside one part (gemv_stream_takes_lora), so a group reads one part.
inline constexpr int kLoraParts = 3;

template <int kXRows>
struct LoraLanes {
  const __half* bt[kXRows][kLoraParts];
  float u[kXRows][kLoraParts];

  // Before the PDL wait: each row's factors.
  __device__ __forceinline__ void find_factors(const GemvArgs& a, int parts, int lane) {
    const backend::cpu::LoraTableArgs& t = a.lora;
#pragma unroll
    for (int r = 0; r < kXRows; ++r) {
      const int32_t slot = r < a.n ? t.row_slot[r] : -1;
#pragma unroll
      for (int p = 0; p < kLoraParts; ++p) {
        bt[r][p] = nullptr;
        u[r][p] = 0.0f;
        if (slot < 0 || p >= parts) continue;
        const backend::cpu::LoraFactors f = t.factors[int64_t(slot) * t.slot_stride + t.entry[p]];
        if (f.a != nullptr && lane < f.rank)
          bt[r][p] = reinterpret_cast<const __half*>(f.bt) + int64_t(lane) * t.out[p];
      }
    }
  }
  // After the wait: u, which the shrink before wrote.
  __device__ __forceinline__ void read_u(const GemvArgs& a, int lane) {
    const backend::cpu::LoraTableArgs& t = a.lora;
#pragma unroll
    for (int r = 0; r < kXRows; ++r)
#pragma unroll
      for (int p = 0; p < kLoraParts; ++p)
        if (bt[r][p] != nullptr) u[r][p] = t.u[int64_t(r) * t.ldu + int64_t(p) * t.rank_cap + lane];
  }
};

// Part p's element of a per-part array, by selects (a run-time index into
// registers would put the array in local memory).
template <class T>
__device__ __forceinline__ T of_part(const T (&v)[kLoraParts], int p) {
  return p == 0 ? v[0] : p == 1 ? v[1] : v[2];
}

// Group g's part and the column of its first row there.
__device__ __forceinline__ void group_part(const GemvArgs& a, int64_t first_row, int& p, int64_t& col) {
  p = 0;
  col = first_row;
  if (col >= a.parts[0].m) {
    col -= a.parts[0].m;
    p = 1;
    if (col >= a.parts[1].m) {
      col -= a.parts[1].m;
      p = 2;
    }
  }
}

// A lane's factor values of group g (SwiGLU: gate's 4 rows, then up's).
template <bool kSwiglu, int kXRows>
struct LoraGroup {
  __half b[kXRows][kTileRows];
  int part;

  __device__ __forceinline__ void load(const GemvArgs& a, const LoraLanes<kXRows>& lanes, int64_t g) {
    constexpr int kRows = kGroupRows<kSwiglu>;
    int64_t col;
    group_part(a, g * kRows, part, col);
    const int rows = int(std::min<int64_t>(kRows, a.m - g * kRows));
#pragma unroll
    for (int r = 0; r < kXRows; ++r) {
      const __half* row = of_part(lanes.bt[r], part);
      const __half* up = kSwiglu ? lanes.bt[r][1] : nullptr;
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        b[r][i] = row != nullptr && i < rows ? row[col + i] : __half(0.0f);
        if constexpr (kSwiglu) b[r][kRows + i] = up != nullptr && i < rows ? up[col + i] : __half(0.0f);
      }
    }
  }
  __device__ __forceinline__ void add(const LoraLanes<kXRows>& lanes, float (&acc)[kXRows][kTileRows]) const {
    constexpr int kRows = kGroupRows<kSwiglu>;
#pragma unroll
    for (int r = 0; r < kXRows; ++r) {
      const float u = of_part(lanes.u[r], part);
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        acc[r][i] += u * __half2float(b[r][i]);
        if constexpr (kSwiglu) acc[r][kRows + i] += lanes.u[r][1] * __half2float(b[r][kRows + i]);
      }
    }
  }
};

// A consumer thread: its share of every tile of the CTA's groups, against
// each of the launch's n ≤ kXRows x rows (row r at x + r·ldx: the tiles'
// Acts are x's address); kLora: warp 0 adds the adapter terms (LoraLanes).
template <class Tile, bool kSwiglu, int kXRows, bool kLora>
__device__ void consume_tiles(const GemvArgs& a, TileShared<Tile, kXRows>& s, const typename Tile::Acts& x,
                              const LoraLanes<kXRows>& lora) {
  constexpr int kRows = kGroupRows<kSwiglu>;
  const int64_t groups = (a.m + kRows - 1) / kRows, tiles_per_row = (a.k + kTileCols - 1) / kTileCols;
  RingPosition at(TileShared<Tile, kXRows>::kStages);
  int group_parity = 0;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x, group_parity ^= 1) {
    float acc[kXRows][kTileRows] = {};
    LoraGroup<kSwiglu, kXRows> terms;
    if constexpr (kLora)
      if (threadIdx.x < 32) terms.load(a, lora, g);
    for (int64_t c = 0; c < tiles_per_row; ++c) {
      typename Tile::XShare xs[kXRows];
#pragma unroll
      for (int r = 0; r < kXRows; ++r)
        if (r < a.n) xs[r] = Tile::load_x(x + r * a.ldx, a.k, c * kTileCols);
      barrier_wait(shared_address(&s.full[at.slot]), at.parity);
      Tile::accumulate(s.tiles[at.slot], xs, a.n, acc);
      // Each thread releases its own reads (an arrival orders only the
      // arriving thread's accesses before the copy engine's next write).
      barrier_arrive(shared_address(&s.empty[at.slot]));
      at.advance();
    }
    if constexpr (kLora)
      if (threadIdx.x < 32) terms.add(lora, acc);
    reduce_store_group<kSwiglu, kXRows>(a, s.partials[group_parity], g, acc);
  }
}

// x̂ = RMSNorm(x) into shared memory, by the consumer threads, with the bits
// rms_norm gives (row_norm.cuh; the weight g loaded before the PDL wait).
__device__ __forceinline__ void normalize_x(const GemvArgs& a, const float4 (&g)[kRmsNormVec], float* normed) {
  float4 v[kRmsNormVec];
  rms_norm_row<kConsumerThreads>(a.x, g, a.k, a.norm_eps, v);
#pragma unroll
  for (int j = 0; j < kRmsNormVec; ++j) {
    const int i = threadIdx.x + j * kConsumerThreads;
    if (i < a.k / 4) reinterpret_cast<float4*>(normed)[i] = v[j];
  }
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumerThreads) : "memory");
}

// kNorm (one x row): x̂ of a.x through a.norm_w, which the consumers
// compute into shared memory first.
template <class Tile, bool kSwiglu, bool kNorm, int kXRows, bool kLora>
__global__ void __launch_bounds__(kThreads, 1) gemv_stream_kernel(GemvArgs a, typename Tile::Acts x, bool evict_first) {
  static_assert(!kNorm || kXRows == 1, "x̂ in shared memory holds one row");
  extern __shared__ __align__(128) uint8_t shared[];
  auto& s = *reinterpret_cast<TileShared<Tile, kXRows>*>(shared);
  init_ring(s.full, s.empty, TileShared<Tile, kXRows>::kStages, kConsumerThreads);
  __syncthreads();
  if (threadIdx.x >= kConsumerThreads) {
    // The weights, which no kernel writes, stream in before (and while) the
    // consumers wait for the kernel before this one (launch.cuh): the copy
    // engine fills the first slots during its tail. The producer writes
    // nothing in global memory and reads only weights, so it needs no wait
    // of its own; the consumers' wait keeps the CTA from completing before
    // the previous kernel.
    if (threadIdx.x == kConsumerThreads) produce_tiles<Tile, kSwiglu, kXRows>(a, s, evict_first);
    return;
  }
  float4 g[kNorm ? kRmsNormVec : 1];
  if constexpr (kNorm) load_norm_weight<kConsumerThreads>(a.norm_w, a.k, g);  // before the wait: weights
  LoraLanes<kXRows> lora;
  if constexpr (kLora)
    if (threadIdx.x < 32) lora.find_factors(a, kSwiglu ? 2 : a.n_parts, int(threadIdx.x));
  pdl_prologue();
  if constexpr (kLora)
    if (threadIdx.x < 32) lora.read_u(a, int(threadIdx.x));
  if constexpr (kNorm) {
    normalize_x(a, g, s.normed);
    x = s.normed;
  }
  consume_tiles<Tile, kSwiglu, kXRows, kLora>(a, s, x, lora);
}

// One CTA per SM (fewer for few groups).
template <class Tile, bool kSwiglu, bool kNorm, int kXRows, bool kLora = false>
void launch(const GemvArgs& a, const typename Tile::Acts& x) {
  constexpr size_t smem = shared_bytes<Tile, kXRows>(kNorm);
  auto* kernel = gemv_stream_kernel<Tile, kSwiglu, kNorm, kXRows, kLora>;
  static const bool configured = [kernel] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)configured;
  const int64_t groups = (a.m + kGroupRows<kSwiglu> - 1) / kGroupRows<kSwiglu>;
  const unsigned grid = unsigned(std::min<int64_t>(groups, multiprocessor_count()));
  launch_dependent(kernel, grid, kThreads, smem, a, x, weights_evict_first());
}
#endif

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Launches below this many weight bytes keep the warp-per-row kernel: their
// time is mostly ramp, which a one-wave persistent grid does not shorten.
// (Every Llama-3-8B launch is at least 32 MB in bf16, Q, K and V being one.)
inline constexpr int64_t kMinBytes = int64_t(8) << 20;

// Whether a launch's weights suit a streamed kernel: 16-byte aligned rows
// and bases (bulk copies), at least kMinBytes.
inline bool weights_fit(const GemvArgs& a) {
  bool ok = (a.w_up == nullptr || aligned16(a.w_up)) && gemv_weight_bytes(a) >= kMinBytes;
  for (int p = 0; p < a.n_parts; ++p) ok = ok && aligned16(a.parts[p].w) && a.parts[p].w_row_bytes % 16 == 0;
  return ok;
}

// The same, and the f32 x rows the dense tiles read as 16-byte vectors.
inline bool launch_fits(const GemvArgs& a) { return weights_fit(a) && aligned16(a.x) && a.ldx % 4 == 0; }

}  // namespace brioche::cuda::detail::stream
