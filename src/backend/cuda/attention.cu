// Paged attention on the device: K/V appended through block tables, and
// causal GQA attention of every batch row against its sequence's cache.
//
// One CTA takes (query row, KV head, split of the key range) and all
// n_heads/n_kv_heads query heads that share that KV head, so each K/V row is
// read once per group. Its 4 warps stride over the keys; a warp's lanes form
// key slots that take 1 to 4 keys per step each (KeyLanes), each lane a
// slice of its keys' K and V, of q and of the accumulator. The softmax is
// online (base 2, q pre-scaled by scale·log2 e):
//   m' = max(m, s);  l' = l·2^(m−m') + Σ 2^(s−m');  acc' = acc·2^(m−m') + Σ 2^(s−m')·v
// With several splits (long contexts, few rows), each writes (acc, m, l) and
// a combine kernel merges them: out = Σ_s 2^(m_s−M) acc_s / Σ_s 2^(m_s−M) l_s;
// up to 16 splits are one thread block cluster and merge through distributed
// shared memory instead (merge_in_cluster, decode_splits). The merge writes
// the output: f32 rows, 16-bit rows for the O projection's GEMM
// (AttentionOut16), or the int8 blocks of its GEMV
// (rope_store_kv_attention_accumulate), a warp per 32 values. Batches of
// decode rows over an f16 cache go to the tensor-core kernel of
// attention_decode_mma.cu instead (same grid, splits and merges;
// attention_paged.cuh holds what the two share).
#include <cuda_fp16.h>

#include <algorithm>
#include <bit>
#include <vector>

#include "backend/cuda/attention_any_dim.cuh"
#include "backend/cuda/attention_decode_mma.h"
#include "backend/cuda/attention_decode_splits.h"
#include "backend/cuda/attention_paged.cuh"
#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_int8.h"
#include "backend/cuda/graph.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope.cuh"
#include "core/env_switch.h"

namespace brioche::cuda {

namespace {

using namespace paged;

constexpr float kLog2e = 1.4426950408889634f;

// The score loop's layout: a warp's 32 lanes are KW = 32/L key slots of L
// lanes; each slot takes U keys per step and each of its lanes kValuesPerLane
// consecutive values of those keys' K and V rows (and of q and the
// accumulator). A score is then summed over L lanes (log2 L shuffles, every
// slot's at once) instead of over the warp: with lanes splitting head_dim
// alone, each (key, head) score took 5 shuffles of its own, and at batch 64
// the kernel was bound by them (182 µs per 8B layer for 268 MB of K/V).
// Measured on the H200 (docs/perf-log/cuda-decode.md#attention-key-slots): 8 values a lane beat 16 (half the
// registers: 4 CTAs per SM instead of 2; 8B at batch 64: 6,590 vs 6,905
// tokens/s), and U keys per slot keep more K/V in flight per warp
// (launch_attention).
constexpr int kValuesPerLane = 8;
template <int HD>
struct KeyLanes {
  static constexpr int DK = kValuesPerLane;
  static constexpr int L = HD / DK;  // lanes per key: 8, 16 or 32
  static constexpr int KW = 32 / L;  // key slots per warp
  static_assert(L >= 1 && L <= 32 && HD % DK == 0, "KeyLanes: head_dim must split into DK-value lanes");
};

// DK cache values of one K or V row as loaded (16-byte words: f16 or f32),
// converted to float where they are used.
template <typename KV, int DK>
struct RawRow {
  uint4 w[DK * sizeof(KV) / 16];
};

template <typename KV, int DK>
__device__ __forceinline__ void load_raw(const KV* p, RawRow<KV, DK>& r) {
  const uint4* s = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < int(DK * sizeof(KV) / 16); ++i) r.w[i] = s[i];
}

template <typename KV, int DK>
__device__ __forceinline__ void to_floats(const RawRow<KV, DK>& r, float (&out)[DK]) {
#pragma unroll
  for (int i = 0; i < int(DK * sizeof(KV) / 16); ++i) {
    if constexpr (sizeof(KV) == 2) {
      const __half2* h = reinterpret_cast<const __half2*>(&r.w[i]);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const float2 f = __half22float2(h[t]);
        out[8 * i + 2 * t] = f.x;
        out[8 * i + 2 * t + 1] = f.y;
      }
    } else {
      const float4 f = *reinterpret_cast<const float4*>(&r.w[i]);
      out[4 * i] = f.x, out[4 * i + 1] = f.y, out[4 * i + 2] = f.z, out[4 * i + 3] = f.w;
    }
  }
}

// The K and V values [col, col + DK) of `key` (clamped to k1: a key past it
// is masked by the caller); the row's own key from own_k and own_v (this
// lane's values in shared memory, where warp 0 put them as it stored them).
template <typename KV, int DK>
__device__ __forceinline__ void load_key(const AttnParams& p, const int32_t* table, const KV* k_cache,
                                         const KV* v_cache, int key, int k1, int own_key, const KV* own_k,
                                         const KV* own_v, int64_t slot_elems, int64_t col, RawRow<KV, DK>& k,
                                         RawRow<KV, DK>& v) {
  key = min(key, k1);
  if (key == own_key) {
    load_raw<KV, DK>(own_k, k);
    load_raw<KV, DK>(own_v, v);
    return;
  }
  const int64_t block = table[key / p.block_size];
  const int64_t off = (block * p.block_size + key % p.block_size) * slot_elems + col;
  load_raw<KV, DK>(k_cache + off, k);
  load_raw<KV, DK>(v_cache + off, v);
}

// HD: head_dim; kMaxGroup ≥ n_heads / n_kv_heads; kRope: RoPE and the K/V
// store taken in (AttnParams); U: keys per slot and step (KeyLanes). q, RoPE
// and the new K/V are handled with lanes splitting head_dim (DPL values
// each, as RopeLane pairs them); the keys with the KeyLanes layout.
template <typename KV, int HD, int kMaxGroup, bool kRope, int U>
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(AttnParams p) {
  constexpr int DPL = HD / 32;
  using Lanes = KeyLanes<HD>;
  constexpr int DK = Lanes::DK, L = Lanes::L, KW = Lanes::KW;
  constexpr int kWarpKeys = KW * U;  // keys a warp takes per step: key u of slot k is base + u·KW + k
  const int r = blockIdx.x / p.n_kv_heads, kv_head = blockIdx.x % p.n_kv_heads;
  const int split = blockIdx.y;
  const int group = p.n_heads / p.n_kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int key_slot = lane / L, sl = lane % L;
  // Before the PDL wait (launch.cuh) only what no kernel of this step
  // writes: the rows' positions and block tables (copied in before the step
  // or the call) and, in a decode step (kRope), the keys before the row's
  // own, which earlier steps wrote. So a warp's first K/V loads overlap the
  // QKV projection's tail instead of following it.
  const SplitKeys keys = split_keys(p, r, split);
  const bool active = keys.active;
  __shared__ ClusterInbox<HD, kMaxGroup> inbox;
  init_inbox(p, keys, split, inbox);
  const int k0 = keys.k0, k1 = keys.k1;
  const int32_t* table = active ? row_table(p, keys.seq) : nullptr;
  const int64_t slot_elems = int64_t(p.n_kv_heads) * HD;
  const int64_t col = int64_t(kv_head) * HD + sl * DK;
  const KV* k_cache = static_cast<const KV*>(p.k);
  const KV* v_cache = static_cast<const KV*>(p.v);
  // The row's own key, rotated and rounded as the cache holds it (K, then V).
  __shared__ __align__(16) KV own_kv[2 * HD];
  const int64_t own_slot = active ? own_key_slot<kRope>(p, keys, table) : -1;
  const int own_key = own_slot >= 0 ? keys.row.pos : -1;
  auto load_slot_key = [&](int step_base, int u, RawRow<KV, DK>& k, RawRow<KV, DK>& v) {
    load_key(p, table, k_cache, v_cache, step_base + u * KW + key_slot, k1, own_key, own_kv + sl * DK,
             own_kv + HD + sl * DK, slot_elems, col, k, v);
  };
  auto load_step = [&](int step_base, RawRow<KV, DK>(&k)[U], RawRow<KV, DK>(&v)[U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) load_slot_key(step_base, u, k[u], v[u]);
  };
  // In a decode step, the keys of the warp's first step that precede the
  // row's own (all of them but in the split that holds it, whose last key it
  // is: keys past k1 are clamped to it), and its whole second step when
  // that precedes it too (a split of 16 keys at head_dim 128 is two steps of
  // the CTA's 4 warps). The own key comes from own_kv after the wait.
  constexpr int kStride = kWarps * kWarpKeys;
  RawRow<KV, DK> k_cur[U], v_cur[U], k_next[U], v_next[U];
  int base = k0 + warp * kWarpKeys;
  const int base_first = base;
  bool first_early[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    first_early[u] = kRope && base <= k1 && min(base + u * KW + key_slot, k1) < keys.row.pos;
    if (first_early[u]) load_slot_key(base, u, k_cur[u], v_cur[u]);
  }
  const bool second_step_early =
      kRope && base + kStride <= k1 && min(base + kStride + kWarpKeys - 1, k1) < keys.row.pos;
  if (second_step_early) load_step(base + kStride, k_next, v_next);
  const detail::RopeLane<DPL> rope = early_rope<kRope, DPL>(p, keys, lane);
  output_prologue(p);
  if (!active) {
    leave_cluster_merge(p);
    return;
  }
  // q (zero for heads past the group), rotated and pre-scaled by warp 0,
  // reaches every warp's key layout through shared memory (sm_acc, free
  // until the warps' partials); warp 0 also stores the row's own key when
  // it is one of this CTA's, in the cache and in own_kv, where the key loop
  // reads it (no round trip).
  __shared__ __align__(16) float sm_acc[kWarps][kMaxGroup][HD];
  auto& sq = sm_acc[0];

  if (warp == 0) {
    float q[kMaxGroup][DPL];
    load_group_q<KV, HD, kMaxGroup, kRope>(p, r, kv_head, lane, rope, own_slot, own_kv, q);
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g)
#pragma unroll
      for (int j = 0; j < DPL; ++j) sq[g][lane * DPL + j] = q[g][j] * p.scale_log2;
  }
  __syncthreads();
  float q[kMaxGroup][DK], acc[kMaxGroup][DK], m[kMaxGroup], l[kMaxGroup];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < DK; ++j) {
      acc[g][j] = 0.0f;
      q[g][j] = sq[g][sl * DK + j];
    }
  }
  __syncthreads();  // every warp has its q before any writes its partial over it

  // Software pipeline: the K and V rows of the next step are in flight while
  // this step's scores and softmax run. Without it a step is a chain of
  // dependent memory latencies (block table, then K, then V).
  if (base <= k1)
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (!first_early[u]) load_slot_key(base, u, k_cur[u], v_cur[u]);
  for (; base <= k1; base += kStride) {
    if (base + kStride <= k1 && !(second_step_early && base == base_first)) load_step(base + kStride, k_next, v_next);
    // Scores of the slot's keys: q · k, summed over the slot's L lanes.
    float s[U][kMaxGroup];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[DK];
      to_floats(k_cur[u], kf);
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        float d = 0.0f;
#pragma unroll
        for (int j = 0; j < DK; ++j) d += q[g][j] * kf[j];
        s[u][g] = d;
      }
    }
#pragma unroll
    for (int off = L / 2; off > 0; off >>= 1)
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);
          // Each slot keeps its own online softmax (m, l, acc), merged below.
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + u * KW + key_slot > k1)
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) s[u][g] = -INFINITY;
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= group) continue;
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) m_new = fmaxf(m_new, s[u][g]);
      if (m_new == -INFINITY) continue;        // none of the slot's keys this step (past k1)
      const float corr = exp2f(m[g] - m_new);  // m = −inf the first time: corr 0
      m[g] = m_new;
      l[g] *= corr;
#pragma unroll
      for (int j = 0; j < DK; ++j) acc[g][j] *= corr;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float e = exp2f(s[u][g] - m_new);  // 0 for a masked key
        l[g] += e;
        float vf[DK];
        to_floats(v_cur[u], vf);
#pragma unroll
        for (int j = 0; j < DK; ++j) acc[g][j] += e * vf[j];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      k_cur[u] = k_next[u];
      v_cur[u] = v_next[u];
    }
  }

  // Merge the warp's key slots (lanes L apart hold the same values of
  // different keys), then the warps through shared memory.
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    float mw = m[g];
#pragma unroll
    for (int off = L; off < 32; off <<= 1) mw = fmaxf(mw, __shfl_xor_sync(0xffffffffu, mw, off));
    const float f = m[g] == -INFINITY ? 0.0f : exp2f(m[g] - mw);  // a slot without keys: weight 0
    l[g] *= f;
#pragma unroll
    for (int j = 0; j < DK; ++j) acc[g][j] *= f;
#pragma unroll
    for (int off = L; off < 32; off <<= 1) {
      l[g] += __shfl_xor_sync(0xffffffffu, l[g], off);
#pragma unroll
      for (int j = 0; j < DK; ++j) acc[g][j] += __shfl_xor_sync(0xffffffffu, acc[g][j], off);
    }
    m[g] = mw;
  }
  __shared__ float sm_m[kWarps][kMaxGroup], sm_l[kWarps][kMaxGroup];
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      sm_m[warp][g] = m[g];
      sm_l[warp][g] = l[g];
    }
  }
  if (lane < L) {
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g)
#pragma unroll
      for (int j = 0; j < DK; ++j) sm_acc[warp][g][sl * DK + j] = acc[g][j];
  }
  __syncthreads();
  merge_partials<HD, kMaxGroup>(p, sm_m, sm_l, &sm_acc[0][0][0], r, kv_head, split, keys, inbox);
}

// One block per (row, head) merges the row's active splits in two L2 round
// trips: warp 0 reads every split's (m, l) at once (a lane per split) and
// turns them into weights 2^(m_s − M) in shared memory; then each thread
// takes one output value and every (kCombineThreads / head_dim)-th split,
// all of its loads in flight together, and the groups' sums are added.
constexpr int kMaxSplits = 64;

__global__ void __launch_bounds__(kCombineThreads) combine_kernel(AttnParams p) {
  output_prologue(p);
  const int r = blockIdx.x / p.n_heads, h = blockIdx.x % p.n_heads;
  if (row_sequence(p, r) < 0) return;
  const int d = p.head_dim, active = row_keys(p, r).active_splits;
  const int64_t part0 = (int64_t(r) * p.n_heads + h) * p.splits;
  __shared__ float weight[kMaxSplits];
  __shared__ float sums[kCombineThreads];
  __shared__ float total_l;
  if (threadIdx.x < 32) {
    const float2* ml = reinterpret_cast<const float2*>(p.part_ml) + part0;  // (m, l) per split
    const int lane = threadIdx.x;
    const float2 none = make_float2(-INFINITY, 0.0f);
    const float2 a = lane < active ? ml[lane] : none, b = lane + 32 < active ? ml[lane + 32] : none;
    float mm = fmaxf(a.x, b.x);
    for (int off = 16; off > 0; off >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, off));
    const float fa = a.x == -INFINITY ? 0.0f : exp2f(a.x - mm);  // empty split: weight 0
    const float fb = b.x == -INFINITY ? 0.0f : exp2f(b.x - mm);
    weight[lane] = fa;
    weight[lane + 32] = fb;
    float ll = fa * a.y + fb * b.y;
    for (int off = 16; off > 0; off >>= 1) ll += __shfl_xor_sync(0xffffffffu, ll, off);
    if (lane == 0) total_l = ll;
  }
  __syncthreads();
  const int groups = kCombineThreads / d;  // head_dim ≤ 256
  const int e = threadIdx.x % d, g = threadIdx.x / d;
  float aa = 0.0f;
  if (g < groups) {
#pragma unroll 16
    for (int s = g; s < active; s += groups) aa += weight[s] * p.part_acc[(part0 + s) * d + e];
  }
  sums[threadIdx.x] = aa;
  __syncthreads();
  if (threadIdx.x < d) {
    float t = 0.0f;
    for (int j = 0; j < groups; ++j) t += sums[j * d + threadIdx.x];
    store_output(p, r, int64_t(h) * d + threadIdx.x, t / total_l);
  }
}

// Where row r's K and V go in the cache (a slot = block · block_size +
// offset), −1 for none: from slot[] for an ordinary call (rows of no
// sequence −1), or from the row's position and block table for a bound decode
// step (position −1: padding).
struct KvSlots {
  const int32_t* slot = nullptr;  // [n_rows]; nullptr when bound
  const int32_t* positions = nullptr;
  const int32_t* tables = nullptr;
  int table_stride = 0, block_size = 0;
  int64_t n_rows = 0;

  __device__ int64_t operator()(int64_t r) const {
    if (r >= n_rows) return -1;
    if (slot != nullptr) return slot[r];
    const int32_t pos = positions[r];
    if (pos < 0) return -1;
    return int64_t(tables[r * table_stride + pos / block_size]) * block_size + pos % block_size;
  }
};

// K/V rows to their cache slots, one thread per value.
template <typename KV>
__global__ void store_kv_kernel(const float* k, const float* v, int64_t k_stride, int64_t v_stride, KvSlots slots,
                                int kv_dim, KV* k_cache, KV* v_cache) {
  detail::pdl_prologue();
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= slots.n_rows * kv_dim) return;
  const int64_t r = t / kv_dim, e = t % kv_dim;
  const int64_t s = slots(r);
  if (s < 0) return;
  k_cache[s * kv_dim + e] = to_cache<KV>(k[r * k_stride + e]);
  v_cache[s * kv_dim + e] = to_cache<KV>(v[r * v_stride + e]);
}

// RoPE on q and k, then k and v to the cache: one thread per rotated pair of
// a q or k head; a k pair's thread stores that pair of K and the same two
// values of V. The same arithmetic as rope_kernel + store_kv_kernel.
template <typename KV>
__global__ void rope_store_kv_kernel(backend::cpu::RopeArgs q, backend::cpu::RopeArgs k, const int32_t* positions,
                                     const float* inv_freq, const float* v, int64_t v_stride, KvSlots slots,
                                     KV* k_cache, KV* v_cache) {
  detail::pdl_prologue();
  const int half = q.head_dim / 2;
  const int64_t pairs_per_row = int64_t(q.n_heads + k.n_heads) * half;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= q.n_rows * pairs_per_row) return;
  const int64_t r = t / pairs_per_row;
  const int h = int((t % pairs_per_row) / half), i = int(t % half);
  if (h < q.n_heads) {
    detail::rope_pair(q.x + r * q.x_stride + int64_t(h) * q.head_dim, q.head_dim, q.interleaved, i, positions[r],
                      inv_freq);
    return;
  }
  const int kh = h - q.n_heads;
  float* kr = k.x + r * k.x_stride + int64_t(kh) * k.head_dim;
  const int2 idx = detail::rope_pair(kr, k.head_dim, k.interleaved, i, positions[r], inv_freq);
  const int64_t s = slots(r);
  if (s < 0) return;
  const int64_t dst = s * int64_t(k.n_heads) * k.head_dim + int64_t(kh) * k.head_dim;
  const float* vr = v + r * v_stride + int64_t(kh) * k.head_dim;
  k_cache[dst + idx.x] = to_cache<KV>(kr[idx.x]);
  k_cache[dst + idx.y] = to_cache<KV>(kr[idx.y]);
  v_cache[dst + idx.x] = to_cache<KV>(vr[idx.x]);
  v_cache[dst + idx.y] = to_cache<KV>(vr[idx.y]);
}

// Keys per slot and step (U): 4 for batches, whose CTAs fill the GPU and
// are bound by the K/V bytes in flight per warp (H200, Llama-3-8B shape, 64
// rows at 1,024 positions: 6,300 → 6,700 / 7,240 / 7,330 tokens/s with 1 / 2 /
// 4), 1 for fewer rows, whose short contexts leave warps of larger steps
// without keys (SmolLM2 at batch 1: 1,575 with 1, 1,530 with 4). Groups of 8
// heads take 2: with 4 the f32-cache kernel spills.
constexpr int kBatchRows = 8;

template <typename KV, int HD, bool kRope>
void launch_attention(const AttnParams& p, dim3 grid) {
  const int group = p.n_heads / p.n_kv_heads;
  const bool batch = p.n_rows >= kBatchRows;
  constexpr int kThreads = kWarps * 32;
  if (group <= 4) {
    if (batch)
      launch_split_attention<attention_kernel<KV, HD, 4, kRope, 4>>(p, grid, kThreads, 0);
    else
      launch_split_attention<attention_kernel<KV, HD, 4, kRope, 1>>(p, grid, kThreads, 0);
  } else if (group <= 8) {
    if (batch)
      launch_split_attention<attention_kernel<KV, HD, 8, kRope, 2>>(p, grid, kThreads, 0);
    else
      launch_split_attention<attention_kernel<KV, HD, 8, kRope, 1>>(p, grid, kThreads, 0);
  } else {
    fail("paged_attention (cuda): at most 8 query heads per KV head, got ", group);
  }
}

template <typename KV, bool kRope>
void launch_attention_dim(const AttnParams& p, dim3 grid) {
  switch (p.head_dim) {
    case 64: launch_attention<KV, 64, kRope>(p, grid); return;
    case 128: launch_attention<KV, 128, kRope>(p, grid); return;
    case 256: launch_attention<KV, 256, kRope>(p, grid); return;
    default: fail("paged_attention (cuda): head_dim must be 64, 128 or 256, got ", p.head_dim);
  }
}

// The host metadata of a call in one upload: row_seq, row_pos, table_offset,
// tables (see AttnParams).
const int32_t* upload_metadata(const backend::cpu::PagedAttentionArgs& a, int n_rows, size_t table_total) {
  std::vector<int32_t> meta(size_t(2 * n_rows + a.n_sequences) + table_total, 0);
  int32_t* row_seq = meta.data();
  int32_t* row_pos = row_seq + n_rows;
  int32_t* table_offset = row_pos + n_rows;
  int32_t* tables = table_offset + a.n_sequences;
  std::fill(row_seq, row_seq + n_rows, -1);
  int32_t offset = 0;
  for (int s = 0; s < a.n_sequences; ++s) {
    const backend::cpu::KvSequence& seq = a.sequences[s];
    for (int32_t i = 0; i < seq.n_rows; ++i) {
      row_seq[seq.first_row + i] = s;
      row_pos[seq.first_row + i] = seq.n_past + i;
    }
    table_offset[s] = offset;
    std::copy(seq.block_table, seq.block_table + seq.n_table_blocks, tables + offset);
    offset += seq.n_table_blocks;
  }
  return static_cast<const int32_t*>(upload_cached(meta.data(), meta.size() * 4));
}

// The slots of a store_kv call: the decode binding's, or computed on the
// host from the sequences' block tables and uploaded.
KvSlots kv_slots(const backend::cpu::StoreKvArgs& a) {
  if (const DecodeBinding* b = decode_binding())
    return {.positions = b->positions,
            .tables = b->tables,
            .table_stride = b->table_stride,
            .block_size = a.cache.block_size,
            .n_rows = b->n_rows};
  int64_t n_rows = 0;
  for (int s = 0; s < a.n_sequences; ++s)
    n_rows = std::max<int64_t>(n_rows, a.sequences[s].first_row + a.sequences[s].n_rows);
  if (n_rows == 0) return {};
  std::vector<int32_t> slot(size_t(n_rows), -1);
  for (int s = 0; s < a.n_sequences; ++s) {
    const backend::cpu::KvSequence& seq = a.sequences[s];
    for (int32_t i = 0; i < seq.n_rows; ++i) {
      const int64_t pos = int64_t(seq.n_past) + i;
      slot[seq.first_row + i] =
          int32_t(int64_t(seq.block_table[pos / a.cache.block_size]) * a.cache.block_size + pos % a.cache.block_size);
    }
  }
  return {.slot = static_cast<const int32_t*>(upload_cached(slot.data(), slot.size() * 4)), .n_rows = n_rows};
}

// What rope_store_kv needs of its arguments (q and k rotated alike, the
// stored K being k's rows).
void check_rope_store_kv(const backend::cpu::RopeArgs& q, const backend::cpu::RopeArgs& k,
                         const backend::cpu::StoreKvArgs& kv) {
  BRIOCHE_CHECK(q.n_rows == k.n_rows && q.head_dim == k.head_dim && q.interleaved == k.interleaved &&
                    q.positions == k.positions && q.inv_freq == k.inv_freq,
                "rope_store_kv: q and k must share rows, head_dim, pairing, positions and frequencies; got rows ",
                q.n_rows, "/", k.n_rows, ", head_dim ", q.head_dim, "/", k.head_dim, ", interleaved ", q.interleaved,
                "/", k.interleaved, (q.positions == k.positions ? "" : ", different positions"),
                (q.inv_freq == k.inv_freq ? "" : ", different frequencies"));
  BRIOCHE_CHECK(kv.k == k.x && kv.k_stride == k.x_stride && kv.kv_dim == k.n_heads * k.head_dim,
                "rope_store_kv: the stored K must be k's rows (", k.n_heads * k.head_dim, " values, stride ",
                k.x_stride, "), got ", kv.kv_dim, " values, stride ", kv.k_stride,
                (kv.k == k.x ? "" : ", another buffer"));
}

}  // namespace

void store_kv(const backend::cpu::StoreKvArgs& a) {
  const KvSlots slots = kv_slots(a);
  if (slots.n_rows == 0) return;
  const unsigned grid = unsigned((slots.n_rows * a.kv_dim + 255) / 256);
  if (a.cache.f16)
    detail::launch_dependent(store_kv_kernel<__half>, grid, 256, 0, a.k, a.v, a.k_stride, a.v_stride, slots, a.kv_dim,
                             static_cast<__half*>(a.cache.k), static_cast<__half*>(a.cache.v));
  else
    detail::launch_dependent(store_kv_kernel<float>, grid, 256, 0, a.k, a.v, a.k_stride, a.v_stride, slots, a.kv_dim,
                             static_cast<float*>(a.cache.k), static_cast<float*>(a.cache.v));
}

void rope_store_kv(const backend::cpu::RopeArgs& q, const backend::cpu::RopeArgs& k,
                   const backend::cpu::StoreKvArgs& kv) {
  check_rope_store_kv(q, k, kv);
  const int64_t total = q.n_rows * (q.n_heads + k.n_heads) * (q.head_dim / 2);
  if (total == 0) return;
  const detail::RopeTables t = detail::rope_tables(q, "rope_store_kv");
  const KvSlots slots = kv_slots(kv);
  BRIOCHE_CHECK(slots.n_rows <= q.n_rows, "rope_store_kv: the sequences cover ", slots.n_rows, " rows, q has only ",
                q.n_rows);
  const unsigned grid = unsigned((total + 255) / 256);
  if (kv.cache.f16)
    detail::launch_dependent(rope_store_kv_kernel<__half>, grid, 256, 0, q, k, t.positions, t.inv_freq, kv.v,
                             kv.v_stride, slots, static_cast<__half*>(kv.cache.k), static_cast<__half*>(kv.cache.v));
  else
    detail::launch_dependent(rope_store_kv_kernel<float>, grid, 256, 0, q, k, t.positions, t.inv_freq, kv.v,
                             kv.v_stride, slots, static_cast<float*>(kv.cache.k), static_cast<float*>(kv.cache.v));
}

namespace {

// The paged attention launches; `rope` set: the kRope kernels (AttnParams).
struct RopeInAttention {
  const float *k, *v;
  int64_t k_stride, v_stride;
  const float* inv_freq;  // host [head_dim / 2]
  bool interleaved;
};

void attend(const backend::cpu::PagedAttentionArgs& args, const RopeInAttention* rope, AttentionOut16 out16,
            Int8Out int8 = {}) {
  // Sequences with many rows (prefill) go to the tensor-core kernel of
  // attention_prefill.cu; the rest (decode rows, bound decode steps) stay here.
  backend::cpu::PagedAttentionArgs a = args;
  std::vector<backend::cpu::KvSequence> rest;
  if (decode_binding() == nullptr) {
    rest = prefill_attention(args, out16);
    BRIOCHE_CHECK(int8.q == nullptr || rest.size() == size_t(args.n_sequences),
                  "paged_attention: int8 output is for decode rows; a sequence of ", kPrefillMinRows,
                  " or more rows went to the prefill kernel");
    a.sequences = rest.data();
    a.n_sequences = int(rest.size());
  }
  int n_rows = 0, max_keys = 0, covered_rows = 0;
  size_t table_total = 0;
  for (int s = 0; s < a.n_sequences; ++s) {
    const backend::cpu::KvSequence& seq = a.sequences[s];
    n_rows = std::max(n_rows, seq.first_row + seq.n_rows);
    covered_rows += seq.n_rows;
    max_keys = std::max(max_keys, seq.n_past + seq.n_rows);
    table_total += size_t(seq.n_table_blocks);
  }
  if (n_rows == 0) return;
  const DecodeBinding* bound = decode_binding();
  if (bound != nullptr) {
    BRIOCHE_CHECK(n_rows == bound->n_rows, "paged_attention: ", n_rows, " rows but the decode binding has ",
                  bound->n_rows);
    max_keys = bound->max_keys;
  }
  // Shapes the fast kernels do not take (Gemma 4's head dims 512, or 16 and
  // 32 in test models) run on the plain kernel of attention_any_dim.cu.
  const bool any_dim = !fast_attention_takes(a.head_dim, a.n_heads / a.n_kv_heads);
  const bool mma = !any_dim && attention_mma_takes(a.cache.f16, a.cache.block_size, a.head_dim,
                                                   a.n_heads / a.n_kv_heads, covered_rows);
  const auto [splits, cluster_merge, row_splits] =
      any_dim ? DecodeSplits{.splits = 1, .cluster_merge = false, .rows = {}}
              : decode_splits(covered_rows, n_rows, a.n_kv_heads, a.head_dim, max_keys, mma);
  const bool combine = splits > 1 && !cluster_merge;  // partials through memory, then the combine kernel
  const int base_ctas = n_rows * a.n_kv_heads;

  AttnParams p{.q = a.q,
               .out = a.out,
               .q_stride = a.q_stride,
               .out_stride = a.out_stride,
               .k = a.cache.k,
               .v = a.cache.v,
               .n_heads = a.n_heads,
               .n_kv_heads = a.n_kv_heads,
               .head_dim = a.head_dim,
               .block_size = a.cache.block_size,
               .block_shift = std::countr_zero(unsigned(a.cache.block_size)),
               .scale_log2 = a.scale * kLog2e,
               .sliding_window = a.sliding_window,
               .n_rows = n_rows,
               .row_seq = nullptr,
               .row_pos = nullptr,
               .table_offset = nullptr,
               .tables = nullptr,
               .table_stride = 0,
               .splits = splits,
               .row_splits = row_splits,
               .part_acc = nullptr,
               .part_ml = nullptr,
               .cluster_merge = cluster_merge,
               .out16 = out16,
               .int8 = int8};
  if (bound != nullptr) {
    p.row_pos = bound->positions;
    p.tables = bound->tables;
    p.table_stride = bound->table_stride;
  } else {
    const int32_t* dmeta = upload_metadata(a, n_rows, table_total);
    p.row_seq = dmeta;
    p.row_pos = dmeta + n_rows;
    p.table_offset = dmeta + 2 * n_rows;
    p.tables = dmeta + 2 * n_rows + a.n_sequences;
  }
  std::shared_ptr<void> part_acc, part_ml;
  if (combine) {
    const size_t parts = size_t(n_rows) * a.n_heads * splits;
    part_acc = allocate(parts * a.head_dim * 4);
    part_ml = allocate(parts * 2 * 4);
    p.part_acc = static_cast<float*>(part_acc.get());
    p.part_ml = static_cast<float*>(part_ml.get());
  }
  if (any_dim) return attend_any_dim(p, a.cache.f16);  // (rope_store_kv_attend sends no RoPE here)
  const dim3 grid{unsigned(base_ctas), unsigned(splits), 1u};
  if (rope != nullptr) {
    p.new_k = rope->k;
    p.new_v = rope->v;
    p.new_k_stride = rope->k_stride;
    p.new_v_stride = rope->v_stride;
    p.inv_freq = static_cast<const float*>(upload_cached(rope->inv_freq, size_t(a.head_dim / 2) * 4));
    p.interleaved = rope->interleaved;
    if (mma)
      launch_attention_mma(p, grid, true);
    else if (a.cache.f16)
      launch_attention_dim<__half, true>(p, grid);
    else
      launch_attention_dim<float, true>(p, grid);
  } else {
    if (mma)
      launch_attention_mma(p, grid, false);
    else if (a.cache.f16)
      launch_attention_dim<__half, false>(p, grid);
    else
      launch_attention_dim<float, false>(p, grid);
  }
  if (combine) {
    detail::launch_dependent(combine_kernel, unsigned(n_rows * a.n_heads), unsigned(kCombineThreads), 0, p);
  }
}

// rope_store_kv_attention with the output to out16 or int8.
void rope_store_kv_attend(const backend::cpu::RopeArgs& q, const backend::cpu::RopeArgs& k,
                          const backend::cpu::StoreKvArgs& kv, const backend::cpu::PagedAttentionArgs& args,
                          AttentionOut16 out16, Int8Out int8) {
  check_rope_store_kv(q, k, kv);
  BRIOCHE_CHECK(q.x == args.q && q.x_stride == args.q_stride && q.head_dim == args.head_dim &&
                    q.n_heads == args.n_heads && k.n_heads == args.n_kv_heads,
                "rope_store_kv_attention: attention must read the rotated q (", q.n_heads, " heads of ", q.head_dim,
                ", ", k.n_heads, " KV heads), got ", args.n_heads, " heads of ", args.head_dim, ", ", args.n_kv_heads,
                " KV heads", (q.x == args.q && q.x_stride == args.q_stride ? "" : ", another q buffer"));
  // Inside the attention kernel only when every row is a sequence's one new
  // token at its n_past (a decode step): then no row's attention reads a key
  // another CTA of the call stores, and no row goes to the prefill kernel.
  // A bound verify step's rows read each other's keys: two launches.
  static const bool fuse_on = env_switch_on("BRIOCHE_CUDA_FUSE_ROPE");  // =0: always the two launches
  // (The plain kernel of the shapes the fast ones do not take has no RoPE in it.)
  const bool fuse = fuse_on && fast_attention_takes(args.head_dim, args.n_heads / args.n_kv_heads);
  const DecodeBinding* bound = decode_binding();
  bool decode = fuse && bound != nullptr && !bound->rows_share_sequences;
  if (fuse && bound == nullptr) {
    decode = true;
    for (int s = 0; s < kv.n_sequences && decode; ++s) {
      const backend::cpu::KvSequence& seq = kv.sequences[s];
      decode = seq.n_rows == 1 && q.positions[seq.first_row] == seq.n_past;
    }
  }
  if (!decode) {
    cuda::rope_store_kv(q, k, kv);  // qualified: ADL also finds backend::cpu's
    attend(args, nullptr, out16, int8);
    return;
  }
  const RopeInAttention rope{.k = k.x,
                             .v = kv.v,
                             .k_stride = k.x_stride,
                             .v_stride = kv.v_stride,
                             .inv_freq = q.inv_freq,
                             .interleaved = q.interleaved};
  attend(args, &rope, out16, int8);
}

// Two steps of the CUDA-core kernel's key slots (kWarps warps × KeyLanes'
// 32 / L slots, a key a slot at a row): 32 keys at head_dim 64, 16 at 128.
// A split of one step does little more than its share of the merge, so
// short contexts give each split two steps; past 16 such splits (512 keys at
// head_dim 64) that was slower than more, smaller splits, so longer contexts
// take kMinSplitKeys (measured in docs/perf-log/cuda-decode.md#smollm2-attention-splits).
int two_steps_keys(int head_dim) { return std::max(kMinSplitKeys, 2 * kWarps * 32 / (head_dim / kValuesPerLane)); }

// The fewest keys a launch gives a split at its longest row (the batch
// kernels' rule): two steps on the CUDA-core kernel while the splits still
// merge in their cluster, else kMinSplitKeys.
int min_split_keys(int head_dim, int max_keys, bool mma) {
  const int two_steps = two_steps_keys(head_dim);
  if (!mma && max_keys <= kMaxClusterSplits * two_steps) return two_steps;
  return kMinSplitKeys;
}

static_assert(kRowExactRows < kBatchRows && kRowExactRows < kMmaMinRows,
              "row-exact launches must stay on the one-key-a-slot CUDA-core kernel");

}  // namespace

DecodeSplits decode_splits(int covered_rows, int launch_rows, int n_kv_heads, int head_dim, int max_keys, bool mma) {
  // Enough CTAs to fill the GPU (as many per SM as the kernel's registers
  // and shared memory let it hold: 4 for the CUDA-core kernel, 2 for the
  // tensor-core one), never splits under min_split_keys: a decode step has
  // few (row, KV head) pairs, and a CTA's walk over its keys is a latency
  // chain.
  const int ctas_per_sm = mma ? attention_mma_ctas_per_sm() : 4;
  const auto fill = [&](int ctas) { return std::max(1, (ctas_per_sm * multiprocessor_count() + ctas - 1) / ctas); };
  // Up to 16 splits merge in their cluster (merge_in_cluster) instead of a
  // combine kernel: at batch 1, launches sized for up to 256 keys (a decode
  // graph sizes them by its bucket; 512 at head_dim 64, min_split_keys
  // above), and the tensor-core kernel's batches at every length (they
  // split 2–5 ways).
  // Decode at batch 1, 128-token prompts, two calls: SmolLM2 1,574–1,635 →
  // 1,663–1,706 tokens/s, Llama-3-8B Q4_0 529–539 → 545–556; SmolLM2 16
  // rows at 1,024 keys 15,736–15,826 → 15,907–16,226. Capping longer
  // contexts at batch 1 to 16 splits to merge them the same way was at par
  // at 1,024 keys (fewer splits cost what the combine kernel did), so they
  // keep it.
  // BRIOCHE_CUDA_ATTENTION_CLUSTER=0: always the combine kernel (A/B runs).
  static const bool cluster_on = env_switch_on("BRIOCHE_CUDA_ATTENTION_CLUSTER");
  // BRIOCHE_CUDA_ATTENTION_ROW_SPLITS=0: small launches split by the launch's rule too (A/B runs).
  static const bool row_exact_on = env_switch_on("BRIOCHE_CUDA_ATTENTION_ROW_SPLITS");
  int splits = 0;
  RowSplitRule rows;
  if (row_exact_on && !mma && launch_rows <= kRowExactRows) {
    // Each row as it would split alone: a lone row's fill of the GPU.
    rows = {.cap = std::min(fill(n_kv_heads), kMaxSplits), .short_keys = two_steps_keys(head_dim)};
    splits = rows.splits(max_keys);
  } else {
    const int covered_ctas = std::max(1, covered_rows * n_kv_heads);  // rows of no sequence return at once
    splits =
        std::min({fill(covered_ctas), std::max(1, max_keys / min_split_keys(head_dim, max_keys, mma)), kMaxSplits});
  }
  return {splits, cluster_on && splits > 1 && splits <= kMaxClusterSplits, rows};
}

void paged_attention(const backend::cpu::PagedAttentionArgs& args, AttentionOut16 out16) {
  attend(args, nullptr, out16);
}

void rope_store_kv_attention(const backend::cpu::RopeArgs& q, const backend::cpu::RopeArgs& k,
                             const backend::cpu::StoreKvArgs& kv, const backend::cpu::PagedAttentionArgs& args,
                             AttentionOut16 out16) {
  rope_store_kv_attend(q, k, kv, args, out16, {});
}

namespace {

// attention_quantizes_for, with the projection's GEMV arguments `g` made.
bool quantizes_for(const cpu::MatmulArgs& projection, const detail::GemvArgs& g, int head_dim) {
  static const bool on = env_switch_on("BRIOCHE_CUDA_ATTENTION_INT8");
  return on && head_dim % 32 == 0 && head_dim <= 256 && projection.n >= 1 && projection.n <= detail::kMaxGemvRows &&
         projection.m > 0 && dtype_info(projection.wtype).quantized &&
         detail::gemv_quant_reads_int8(projection.wtype, g);
}

}  // namespace

bool attention_quantizes_for(const cpu::MatmulArgs& projection, int head_dim) {
  return quantizes_for(projection, detail::accumulate_gemv_args(projection), head_dim);
}

void rope_store_kv_attention_accumulate(const backend::cpu::RopeArgs& q, const backend::cpu::RopeArgs& k,
                                        const backend::cpu::StoreKvArgs& kv,
                                        const backend::cpu::PagedAttentionArgs& args, const cpu::MatmulArgs& projection,
                                        NormHandOn hand_on) {
  const detail::GemvArgs g = detail::accumulate_gemv_args(projection, hand_on);
  BRIOCHE_CHECK(quantizes_for(projection, g, args.head_dim) && projection.x == args.out &&
                    projection.k == int64_t(args.n_heads) * args.head_dim,
                "rope_store_kv_attention_accumulate: expected a projection of the attention's output (k ",
                int64_t(args.n_heads) * args.head_dim, ") on the int8 GEMV path (1..", detail::kMaxGemvRows,
                " rows of a type it takes, head_dim a multiple of 32); got ", projection.n, " rows of ",
                dtype_name(projection.wtype), ", k ", projection.k, ", head_dim ", args.head_dim,
                (projection.x == args.out ? "" : ", another x"));
  const detail::Int8Scratch x = detail::allocate_int8_acts(g.n, g.k);
  static const bool release = env_switch_on("BRIOCHE_CUDA_ATTENTION_RELEASE");  // =0: pdl_prologue (A/B runs)
  const bool streamed = release && detail::gemv_stream_rows_takes(projection.wtype, g);
  rope_store_kv_attend(q, k, kv, args, {}, {.q = x.q, .ds = x.ds, .release_next = streamed});
  detail::gemv_int8_quantized(projection.wtype, g, x.acts());
}

}  // namespace brioche::cuda
