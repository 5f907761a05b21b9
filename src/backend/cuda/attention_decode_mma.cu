// Decode attention on tensor cores, for batches of decode rows.
//
// A CTA takes (row, KV head, split of the row's keys), on the same grid and
// with the same key splits as the CUDA-core kernel of attention.cu, so the
// combine kernel merges either. The group's query heads are the rows of one
// mma tile (16 rows: the heads, then zeros). Per tile of kKeys = 64 keys,
// gathered from the paged cache by the whole CTA with cp.async into a ring
// of kStages buffers (tiles t + 1 and t + 2 load while tile t computes; the
// block table is read a tile ahead), warp w takes keys [16w, 16w + 16):
//   S[16, 16] = Q·Kᵀ                      (head_dim / 16 k-steps, mma.sync m16n8k16)
//   m' = max(m, rowmax S);  P = 2^(S − m');  l' = l·2^(m − m') + rowsum P
//   O[16, D] = O·2^(m − m') + P·V          (P rounded to f16, one k-step)
// Each warp keeps its own (m, l, O) and the warps merge at the end
// (attention_paged.cuh). q is pre-scaled by scale·log2 e before its f16
// rounding, so S is in base-2 units as in the other kernels.
//
// Why: at 64 rows × 1,024 positions (Llama-3-8B shape) the CUDA-core kernel
// read 268 MB of K/V per layer in 97 µs (2.8 TB/s), bound by instructions:
// every K and V value converted to f32 and multiplied once per head of the
// group. On tensor cores a tile's arithmetic is a few dozen mma per warp,
// and what is left is keeping K/V bytes in flight: 32 KB per tile at
// head_dim 128, kStages tiles per CTA (ncu: 75 µs, 3.6 TB/s, with 2 stages).
//
// The tile layouts, fragments and the online-softmax step are mma_tile.cuh's
// (shared with the prefill and training kernels).
#include <cuda_fp16.h>

#include <bit>

#include "backend/cuda/attention_decode_mma.h"
#include "backend/cuda/attention_paged.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_tile.cuh"
#include "core/env_switch.h"

namespace brioche::cuda::paged {

namespace {

using namespace mma_tile;

constexpr int kKeys = 16 * kWarps;  // keys per shared tile: 16 per warp
constexpr int kThreads = kWarps * 32;
constexpr int kQRows = 16;  // an mma tile's rows

// Tiles in flight per CTA, and the CTAs an SM holds with their shared
// memory: (2·kStages·kKeys + kQRows)·head_dim halves, 100 KB at head_dim 128.
// 3 stages at 2 CTAs per SM beat 2 stages at 3 CTAs per SM, whichever the
// split count (docs/perf-log/cuda-decode.md#batched-tensor-core-attention
// has the numbers). With 2 CTAs per SM a
// batch of 64 rows × 8 KV heads fills the GPU in two waves without splits,
// so no combine kernel runs after it.
constexpr int kStages = 3;
constexpr int kCtasPerSm = 2;

template <int D>
constexpr size_t smem_bytes() {
  return size_t(2 * kStages * kKeys + kQRows) * D * sizeof(__half);
}

// A thread's share of a tile's loads: 16-byte chunk c = tid % (D/8) of rows
// tid / (D/8) + j·(kThreads / (D/8)), j < kRows.
template <int D>
struct TileLanes {
  static constexpr int kChunks = D / 8;
  static constexpr int kRowStep = kThreads / kChunks;
  static constexpr int kRows = kKeys / kRowStep;
};

// The cache blocks of this thread's rows of the tile at key0 (0 past k1):
// read one tile ahead of its loads, so the block table's latency is not in
// front of every tile's cp.async.
template <int D>
__device__ __forceinline__ void fetch_blocks(const AttnParams& p, const int32_t* table, int key0, int k1,
                                             int32_t (&blocks)[TileLanes<D>::kRows]) {
  using TL = TileLanes<D>;
  const int row0 = threadIdx.x / TL::kChunks;
#pragma unroll
  for (int j = 0; j < TL::kRows; ++j) {
    const int key = key0 + row0 + j * TL::kRowStep;
    blocks[j] = key <= k1 ? table[key >> p.block_shift] : 0;
  }
}

// Queues the K and V rows of keys [key0, key0 + kKeys) into one buffer (rows
// of D halves, swizzled; `blocks` from fetch_blocks); keys past k1 are
// zero-filled and not read.
template <int D>
__device__ __forceinline__ void load_tile(const AttnParams& p, const int32_t (&blocks)[TileLanes<D>::kRows],
                                          int kv_head, int key0, int k1, __half* sk, __half* sv) {
  using TL = TileLanes<D>;
  const int64_t slot_elems = int64_t(p.n_kv_heads) * D;
  const __half* k_cache = static_cast<const __half*>(p.k);
  const __half* v_cache = static_cast<const __half*>(p.v);
  const int row0 = threadIdx.x / TL::kChunks, c = threadIdx.x % TL::kChunks;
  const int in_block_mask = (1 << p.block_shift) - 1;
#pragma unroll
  for (int j = 0; j < TL::kRows; ++j) {
    const int row = row0 + j * TL::kRowStep;
    const int key = key0 + row;
    const bool valid = key <= k1;
    const int64_t slot = (int64_t(blocks[j]) << p.block_shift) + (key & in_block_mask);
    const int64_t off = valid ? slot * slot_elems + int64_t(kv_head) * D + c * 8 : 0;
    cp_async_16(sk + swizzled<D>(row, c), k_cache + off, valid);
    cp_async_16(sv + swizzled<D>(row, c), v_cache + off, valid);
  }
}

// D: head_dim; kMaxGroup ≥ n_heads / n_kv_heads (≤ 8: a head is row g of a
// thread's row pair (g, g + 8)); kRope: RoPE and the K/V store taken in.
template <int D, int kMaxGroup, bool kRope>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) attention_mma_kernel(AttnParams p) {
  constexpr int kDSteps = D / 16;
  constexpr int DPL = D / 32;  // q values per lane of warp 0 (load_group_q)
  static_assert(kMaxGroup <= 8, "attention_mma_kernel: at most 8 heads per KV head");
  extern __shared__ __align__(128) unsigned char smem[];
  __half* sk = reinterpret_cast<__half*>(smem);  // [kStages][kKeys][D]
  __half* sv = sk + kStages * kKeys * D;         // [kStages][kKeys][D]
  __half* sq = sv + kStages * kKeys * D;         // [kQRows][D]

  const int r = blockIdx.x / p.n_kv_heads, kv_head = blockIdx.x % p.n_kv_heads, split = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
  const SplitKeys keys = split_keys(p, r, split);
  const int k0 = keys.k0, k1 = keys.k1;
  const int n_tiles = keys.active && k1 >= k0 ? (k1 - k0 + kKeys) / kKeys : 0;
  const int32_t* table = n_tiles > 0 ? row_table(p, keys.seq) : nullptr;
  __shared__ ClusterInbox<D, kMaxGroup> inbox;
  init_inbox(p, keys, split, inbox);
  // Group g of cp.async commits holds tile g's loads (in buffer g % kStages),
  // or nothing past the last tile, so "tile t landed" is "at most
  // kStages − 1 groups pending" once group t + kStages − 1 is committed.
  int32_t blocks[TileLanes<D>::kRows];
  int groups = 0;  // groups committed so far
  auto queue_next = [&] {
    if (groups < n_tiles) {
      const int buf = groups % kStages;
      load_tile<D>(p, blocks, kv_head, k0 + groups * kKeys, k1, sk + buf * kKeys * D, sv + buf * kKeys * D);
      if (groups + 1 < n_tiles) fetch_blocks<D>(p, table, k0 + (groups + 1) * kKeys, k1, blocks);
    }
    cp_async_commit();
    ++groups;
  };
  // Before the PDL wait, as in attention.cu: in a decode step the first tile
  // when all its keys precede the row's own (earlier steps wrote them).
  const bool first_tile_early = kRope && n_tiles > 0 && min(k0 + kKeys - 1, k1) < keys.row.pos;
  if (n_tiles > 0) fetch_blocks<D>(p, table, k0, k1, blocks);
  if (first_tile_early) queue_next();
  const detail::RopeLane<DPL> rope = early_rope<kRope, DPL>(p, keys, lane);
  const int64_t own_slot = n_tiles > 0 ? own_key_slot<kRope>(p, keys, table) : -1;
  output_prologue(p);
  if (n_tiles == 0) {  // (in a cluster, an active split has keys: init_inbox)
    leave_cluster_merge(p);
    return;
  }

  // q: warp 0 loads (and rotates, storing the new K/V first when it is one
  // of this CTA's keys), scales, rounds and stages the group's heads.
  if (warp == 0) {
    float q[kMaxGroup][DPL];
    load_group_q<__half, D, kMaxGroup, kRope>(p, r, kv_head, lane, rope, own_slot, static_cast<__half*>(nullptr), q);
#pragma unroll
    for (int row = 0; row < kQRows; ++row)
#pragma unroll
      for (int j = 0; j < DPL; j += 2) {
        const int col = lane * DPL + j;
        float x0 = 0.0f, x1 = 0.0f;
        if (row < kMaxGroup) {
          x0 = q[row % kMaxGroup][j] * p.scale_log2;
          x1 = q[row % kMaxGroup][j + 1] * p.scale_log2;
        }
        *reinterpret_cast<uint32_t*>(sq + swizzled<D>(row, col / 8) + col % 8) = pack2<__half>(x0, x1);
      }
  }
  __syncthreads();  // q staged; the new key (if any) stored before any tile that holds it loads
  uint32_t qf[kDSteps][4];
#pragma unroll
  for (int kk = 0; kk < kDSteps; ++kk) load_a<D>(qf[kk], sq, 0, kk);

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  while (groups < kStages - 1) queue_next();
  for (int t = 0; t < n_tiles; ++t) {
    queue_next();  // tile t + kStages − 1, into the buffer tile t − 1 used
    cp_async_wait<kStages - 1>();
    __syncthreads();
    // This warp's 16 keys (rows 16w.. of the tile; 16w is a multiple of 8,
    // so the swizzle of the sub-tile's rows is the tile's).
    const int buf = t % kStages;
    const __half* kt = sk + (buf * kKeys + 16 * warp) * D;
    const __half* vt = sv + (buf * kKeys + 16 * warp) * D;
    float s[2][4];
    uint32_t b_s[4];  // fragment registers (see mma_tile.cuh)
    mma_a_times_xt<D>(s, qf, kt, b_s);
    const int warp_key0 = k0 + t * kKeys + 16 * warp;
    if (warp_key0 + 15 > k1) {
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (warp_key0 + 8 * j + 2 * t4 + (e & 1) > k1) s[j][e] = -INFINITY;
    }
    online_softmax_step(s, o, m, l);
    uint32_t a[4], b[4];
    mma_add_c_times_x<D>(o, s, vt, a, b);
    __syncthreads();  // the next iteration's loads overwrite this buffer
  }

  // The warps' (m, l, O) of the group's heads (row g of each thread's pair)
  // into shared memory, the K buffers being free now, and merged.
  __shared__ float sm_m[kWarps][kMaxGroup], sm_l[kWarps][kMaxGroup];
  float* sm_acc = reinterpret_cast<float*>(smem);  // [kWarps][kMaxGroup][D]
  static_assert(kWarps * kMaxGroup * D * sizeof(float) <= 2 * kKeys * D * sizeof(__half), "merge fits the K buffers");
  const float l_row = quad_sum(l[0]);
  if (g < kMaxGroup) {
    if (t4 == 0) {
      sm_m[warp][g] = m[0];
      sm_l[warp][g] = l_row;
    }
    store_row(sm_acc + (warp * kMaxGroup + g) * D + 2 * t4, o, 0, 1.0f);
  }
  __syncthreads();
  merge_partials<D, kMaxGroup>(p, sm_m, sm_l, sm_acc, r, kv_head, split, keys, inbox);
}

template <int D, int kMaxGroup, bool kRope>
void launch(const AttnParams& p, dim3 grid) {
  constexpr size_t kSmem = smem_bytes<D>();
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(attention_mma_kernel<D, kMaxGroup, kRope>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
    return true;
  }();
  (void)configured;
  launch_split_attention<attention_mma_kernel<D, kMaxGroup, kRope>>(p, grid, kThreads, kSmem);
}

template <int D, bool kRope>
void launch_group(const AttnParams& p, dim3 grid) {
  if (p.n_heads / p.n_kv_heads <= 4)
    launch<D, 4, kRope>(p, grid);
  else
    launch<D, 8, kRope>(p, grid);
}

}  // namespace

}  // namespace brioche::cuda::paged

namespace brioche::cuda {

bool attention_mma_takes(bool f16_cache, int block_size, int head_dim, int group, int n_rows) {
  static const bool enabled = env_switch_on("BRIOCHE_CUDA_DECODE_MMA");
  return enabled && f16_cache && block_size > 0 && std::has_single_bit(unsigned(block_size)) &&
         (head_dim == 64 || head_dim == 128) && group >= 1 && group <= 8 && n_rows >= kMmaMinRows;
}

}  // namespace brioche::cuda

namespace brioche::cuda::paged {

int attention_mma_ctas_per_sm() { return kCtasPerSm; }

void launch_attention_mma(const AttnParams& p, dim3 grid, bool rope) {
  const int group = p.n_heads / p.n_kv_heads;
  BRIOCHE_CHECK(
      (p.head_dim == 64 || p.head_dim == 128) && group >= 1 && group <= 8 && p.block_size == 1 << p.block_shift,
      "attention_mma (cuda): needs head_dim 64 or 128, at most 8 heads per KV head and power-of-two "
      "blocks; got head_dim ",
      p.head_dim, ", ", p.n_heads, "/", p.n_kv_heads, " heads, blocks of ", p.block_size, " (shift ", p.block_shift,
      ")");
  if (p.head_dim == 64) {
    if (rope)
      launch_group<64, true>(p, grid);
    else
      launch_group<64, false>(p, grid);
  } else {
    if (rope)
      launch_group<128, true>(p, grid);
    else
      launch_group<128, false>(p, grid);
  }
}

}  // namespace brioche::cuda::paged
