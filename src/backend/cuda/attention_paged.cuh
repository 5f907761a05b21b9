// What the two decode attention kernels share: the launch parameters, how a
// row's keys split over CTAs (the combine kernel of attention.cu relies on
// both kernels splitting alike), the store of a decode step's new K/V, the
// merge of the CTA's warps into the output or the split's partials, and the
// merge of a cluster's splits (up to 16) in their shared memory.
//
// The kernels: attention.cu's CUDA-core kernel (any cache, head_dim, batch)
// and attention_decode_mma.cu's tensor-core kernel (f16 cache, batches).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/attention_decode_splits.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_int8.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mbarrier.cuh"
#include "backend/cuda/rope.cuh"

namespace brioche::cuda::paged {

constexpr int kWarps = 4;  // warps of a CTA in both kernels
// Threads of attention.cu's combine kernel: a thread group per head_dim
// values, so kCombineThreads / head_dim groups share the splits
// (merge_in_cluster sums in its order).
constexpr int kCombineThreads = 256;

// The attention's output as the int8 blocks of an integer GEMV's x
// (gemv_int8.h: q [n_rows, n_heads · head_dim], ds per 32 values), for the
// O projection that follows (rope_store_kv_attention_accumulate).
struct Int8Out {
  int8_t* q = nullptr;
  float2* ds = nullptr;
  // The projection is a streamed GEMV: the kernels up to it trigger their
  // successor before their PDL wait (output_prologue).
  bool release_next = false;
};

struct AttnParams {
  const float* q;  // [n_rows, n_heads * head_dim], row stride q_stride
  float* out;      // same layout, row stride out_stride
  int64_t q_stride, out_stride;
  const void* k;  // [n_blocks, block_size, n_kv_heads, head_dim]
  const void* v;
  int n_heads, n_kv_heads, head_dim, block_size;
  int block_shift;   // log2(block_size) when a power of two (the tensor-core kernel's requirement)
  float scale_log2;  // scale · log2(e)
  int sliding_window;
  int n_rows;
  // Device metadata: row_seq[n_rows] (−1: not covered), row_pos[n_rows],
  // table_offset[n_sequences], tables[...] (block tables, concatenated).
  // Bound decode steps (graph.h) have no row_seq: row r is sequence r unless
  // row_pos[r] < 0, and its table starts at tables + r·table_stride.
  const int32_t* row_seq;
  const int32_t* row_pos;
  const int32_t* table_offset;
  const int32_t* tables;
  int table_stride;
  int splits;
  RowSplitRule row_splits;  // cap > 0: each row splits by its own length (kRowExactRows)
  float* part_acc;          // [n_rows, n_heads, splits, head_dim]
  float* part_ml;           // [n_rows, n_heads, splits, 2]
  // The splits of each (row, KV head) are one thread block cluster and merge
  // through distributed shared memory (merge_in_cluster) instead of part_acc,
  // part_ml and the combine kernel.
  bool cluster_merge = false;
  // RoPE and the K/V store taken in (rope_store_kv_attention; kRope
  // kernels): q is rotated on load, and the CTA whose keys include the row's
  // own position rotates the row's new k and stores it and v there first.
  const float* new_k = nullptr;  // [n_rows, n_kv_heads · head_dim] before RoPE
  const float* new_v = nullptr;
  int64_t new_k_stride = 0, new_v_stride = 0;
  const float* inv_freq = nullptr;  // [head_dim / 2]
  bool interleaved = false;
  // With out16.rows set, the output goes there instead of out: 16-bit rows
  // [n_rows, n_heads · head_dim] contiguous (kernels.h); with int8.q set, to
  // int8 blocks instead.
  AttentionOut16 out16;
  Int8Out int8;
};

// The PDL prologue (launch.cuh) of the kernels from the attention to the
// projection that reads its int8 output: when that is a streamed GEMV, each
// lets its successor launch before it waits, so the GEMV's CTAs take what
// the attention leaves of each SM and stream weight tiles in while it runs.
// Llama-3-8B decode at batch 1, in one run: Q4_0 500.6–501.6 tokens/s with
// the quantization kernel, 506.0–506.1 with the int8 output, 508.5–509.2
// with this as well; Q8_0 386.1–389.0, 389.9–392.5, 390.9–394.1.
__device__ __forceinline__ void output_prologue(const AttnParams& p) {
  if (p.int8.release_next)
    detail::pdl_prologue_release_first();
  else
    detail::pdl_prologue();
}

// Output value `col` of row r: to out, rounded to out16's 16 bits, or into
// the int8 blocks, where the warp's 32 lanes must store the 32 values of
// block col / 32 together (lane i value i; head_dim is a multiple of 32).
__device__ __forceinline__ void store_output(const AttnParams& p, int r, int64_t col, float v) {
  if (p.int8.q != nullptr) {
    const int64_t k = int64_t(p.n_heads) * p.head_dim, block = col / 32;
    detail::quantize_block_of_warp(v, p.int8.q + r * k + block * 32, p.int8.ds + r * (k / 32) + block);
    return;
  }
  if (p.out16.rows == nullptr) {
    p.out[int64_t(r) * p.out_stride + col] = v;
    return;
  }
  const int64_t i = int64_t(r) * p.n_heads * p.head_dim + col;
  if (p.out16.f16)
    static_cast<__half*>(p.out16.rows)[i] = __float2half_rn(v);
  else
    static_cast<__nv_bfloat16*>(p.out16.rows)[i] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ int row_sequence(const AttnParams& p, int r) {
  return p.row_seq != nullptr ? p.row_seq[r] : (p.row_pos[r] < 0 ? -1 : r);
}

__device__ __forceinline__ const int32_t* row_table(const AttnParams& p, int seq) {
  return p.tables + (p.row_seq != nullptr ? int64_t(p.table_offset[seq]) : int64_t(seq) * p.table_stride);
}

// Row r's keys [first, pos] (a sliding window starts later) and the splits
// that share them: in a row-exact launch (p.row_splits set) the row's own
// rule, else as many as give each at least kMinSplitKeys, up to the
// launch's p.splits. A decode graph's launch has splits for its bucket's
// longest context; shorter contexts leave the rest idle, and the combine
// reads only the active ones.
static_assert(kMinSplitKeys == kWarps * 4, "kMinSplitKeys: one step of the CUDA-core kernel's warps at head_dim 128");

struct RowKeys {
  int first, pos, n_keys, active_splits;
};

__device__ __forceinline__ RowKeys row_keys(const AttnParams& p, int r) {
  const int pos = p.row_pos[r];
  const int first = p.sliding_window > 0 ? max(0, pos - p.sliding_window + 1) : 0;
  const int n_keys = pos - first + 1;
  const int active = p.row_splits.cap > 0 ? p.row_splits.splits(n_keys)
                                          : min(p.splits, max(1, (n_keys + kMinSplitKeys - 1) / kMinSplitKeys));
  return {first, pos, n_keys, active};
}

// The keys [k0, k1] (inclusive; k1 < k0 when none) that split `split` of row
// r takes, and whether the CTA has anything to do.
struct SplitKeys {
  RowKeys row;
  int seq, k0, k1;
  bool active;
};

__device__ __forceinline__ SplitKeys split_keys(const AttnParams& p, int r, int split) {
  SplitKeys s;
  s.seq = row_sequence(p, r);
  s.row = s.seq >= 0 ? row_keys(p, r) : RowKeys{0, 0, 0, 0};
  s.active = s.seq >= 0 && split < s.row.active_splits;
  const int per_split = s.active ? (s.row.n_keys + s.row.active_splits - 1) / s.row.active_splits : 0;
  s.k0 = s.row.first + split * per_split;
  s.k1 = s.active ? min(s.row.pos, s.k0 + per_split - 1) : s.k0 - 1;
  return s;
}

template <typename KV>
__device__ __forceinline__ KV to_cache(float x) {
  if constexpr (sizeof(KV) == 2)
    return __float2half_rn(x);
  else
    return x;
}

// kRope: the cache slot of the row's own key when this split holds it, else
// −1; made before the PDL wait (block tables are uploaded before the step).
template <bool kRope>
__device__ __forceinline__ int64_t own_key_slot(const AttnParams& p, const SplitKeys& s, const int32_t* table) {
  if constexpr (kRope) {
    if (s.active && s.k0 <= s.row.pos && s.row.pos <= s.k1)
      return int64_t(table[s.row.pos / p.block_size]) * p.block_size + s.row.pos % p.block_size;
  }
  return -1;
}

// kRope: the rotation of row position s.row.pos for warp 0's lanes
// (load_group_q), made before the PDL wait: the positions and RoPE
// frequencies are uploaded before the step, and the angles' sincos and the
// frequencies' load then leave the chain that starts at the wait.
template <bool kRope, int DPL>
__device__ __forceinline__ detail::RopeLane<DPL> early_rope(const AttnParams& p, const SplitKeys& s, int lane) {
  if constexpr (kRope) {
    if (s.active && threadIdx.x < 32) return detail::RopeLane<DPL>(lane, p.interleaved, s.row.pos, p.inv_freq);
  }
  return {};
}

// The group's q rows of row r (lanes splitting head_dim, DPL values each;
// zero for heads past the group), rotated by `rope` when kRope; and when
// own_slot ≥ 0 (own_key_slot) the row's new key, rotated, and its value
// stored into that cache slot, and into own_kv (HD values of K, then of V,
// as the cache holds them) when given. One warp; q, k and v are loaded
// together.
template <typename KV, int HD, int kMaxGroup, bool kRope>
__device__ __forceinline__ void load_group_q(const AttnParams& p, int r, int kv_head, int lane,
                                             const detail::RopeLane<HD / 32>& rope, int64_t own_slot, KV* own_kv,
                                             float (&q)[kMaxGroup][HD / 32]) {
  constexpr int DPL = HD / 32;
  const int group = p.n_heads / p.n_kv_heads;
  const int64_t col = int64_t(kv_head) * HD + lane * DPL;
  float k[DPL], v[DPL];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g)
#pragma unroll
    for (int j = 0; j < DPL; ++j)
      q[g][j] = g < group ? p.q[int64_t(r) * p.q_stride + int64_t(kv_head * group + g) * HD + lane * DPL + j] : 0.0f;
  if (kRope && own_slot >= 0) {
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      k[j] = p.new_k[r * p.new_k_stride + col + j];
      v[j] = p.new_v[r * p.new_v_stride + col + j];
    }
  }
  if constexpr (kRope) {
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) rope.apply(q[g], lane);
    if (own_slot >= 0) {
      rope.apply(k, lane);
      const int64_t off = own_slot * p.n_kv_heads * HD + col;
      KV* k_cache = static_cast<KV*>(const_cast<void*>(p.k)) + off;
      KV* v_cache = static_cast<KV*>(const_cast<void*>(p.v)) + off;
#pragma unroll
      for (int j = 0; j < DPL; ++j) {
        const KV kc = to_cache<KV>(k[j]), vc = to_cache<KV>(v[j]);
        k_cache[j] = kc;
        v_cache[j] = vc;
        if (own_kv != nullptr) {
          own_kv[lane * DPL + j] = kc;
          own_kv[HD + lane * DPL + j] = vc;
        }
      }
    }
  }
}

// ---- The merge of the CTA's warps

// The CTA's warps (each an online softmax over its own keys: m, l in
// sm_m/sm_l [kWarps][kMaxGroup], acc in sm_acc [kWarps][kMaxGroup][HD])
// merged for head g: m = max_w m_w, l = Σ_w f_w l_w, and the weights f_w =
// 2^(m_w − m) that merge their acc.
template <int kMaxGroup>
struct WarpsMerged {
  float m = -INFINITY, l = 0.0f, f[kWarps] = {};

  __device__ WarpsMerged(const float (&sm_m)[kWarps][kMaxGroup], const float (&sm_l)[kWarps][kMaxGroup], int g) {
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sm_m[w][g]);
    if (m == -INFINITY) return;  // no keys: weights 0
    for (int w = 0; w < kWarps; ++w) {
      f[w] = exp2f(sm_m[w][g] - m);
      l += f[w] * sm_l[w][g];
    }
  }
};

// Writes the group's heads of row r, the CTA's warps merged: the output when
// the launch has one split, else this split's (acc, m, l) to part_acc and
// part_ml for the combine kernel (merge_in_cluster when the splits merge in
// their cluster).
template <int HD, int kMaxGroup>
__device__ __forceinline__ void merge_warps(const AttnParams& p, const float (&sm_m)[kWarps][kMaxGroup],
                                            const float (&sm_l)[kWarps][kMaxGroup], const float* sm_acc, int r,
                                            int kv_head, int split) {
  const int group = p.n_heads / p.n_kv_heads;
  for (int t = threadIdx.x; t < group * HD; t += blockDim.x) {
    const int g = t / HD, e = t % HD;
    const WarpsMerged<kMaxGroup> mw(sm_m, sm_l, g);
    float aa = 0.0f;
    for (int w = 0; w < kWarps; ++w) aa += mw.f[w] * sm_acc[(w * kMaxGroup + g) * HD + e];
    const int h = kv_head * group + g;
    if (p.splits == 1) {
      store_output(p, r, int64_t(h) * HD + e, aa / mw.l);
    } else {
      const int64_t part = (int64_t(r) * p.n_heads + h) * p.splits + split;
      p.part_acc[part * HD + e] = aa;
      if (e == 0) {
        p.part_ml[2 * part] = mw.m;
        p.part_ml[2 * part + 1] = mw.l;
      }
    }
  }
}

// ---- The merge of a cluster's splits
//
// With p.cluster_merge, the launch's splits of (row r, KV head) are one
// cluster. The group's heads are blocks of 32 output values (head_dim is a
// multiple of 32), each owned by one active split (ClusterMergeLayout,
// attention_decode_splits.h): every active split pushes its partial of
// each block (32 acc values and its head's (m, l)) into the owner's shared
// memory by st.async, and the owner merges the A partials as the combine
// kernel does:
//   out = Σ_s 2^(m_s−M) acc_s / Σ_s 2^(m_s−M) l_s.
// The partials land in the owner's sm_acc (its warps' merge buffer), once
// every CTA of the cluster has read its own: one cluster barrier. The
// owner's mbarrier completes on the bytes it expects, and no CTA reads
// another's shared memory (which would need a second barrier to keep it
// alive until read). It replaced a pull: a barrier, each owner warp reading
// every split's partial remotely, a second barrier; batch-1 decode got faster
// (docs/perf-log/cuda-decode.md#cluster-push-merge). The pushes are 16 bytes
// each (4-byte pushes were slower), and land in sm_acc rather than an inbox of their
// own: that inbox (4 KB at the 8B shape, where the kernel had 12) let the
// merge end ~1 µs sooner but cost SmolLM2's decode 8% and the 8B Q4_0's 2%.

// The partials' values go to the owner's sm_acc, seen as acc[kSlots][32],
// their (m, l) to ml[kSlots] here.
template <int HD, int kMaxGroup>
struct ClusterInbox {
  static constexpr int kSlots = ClusterMergeLayout::slots_for(kMaxGroup * HD / 32);
  static_assert(kSlots * 32 <= kWarps * kMaxGroup * HD, "the partials fit the warps' merge buffer");
  float2 ml[kSlots];
  uint64_t full;  // completes when every partial the CTA owns has landed
};

// Thread 0 of an active split, before the PDL wait: the inbox's barrier
// completes once its one arrival (this one) and the bytes of the A partials
// of each owned block are in. Every split of a row with keys is active and
// has keys (decode_splits: at most 16 splits of at least 16 keys), so each
// pushes.
template <int HD, int kMaxGroup>
__device__ __forceinline__ void init_inbox(const AttnParams& p, const SplitKeys& keys, int split,
                                           ClusterInbox<HD, kMaxGroup>& inbox) {
  if (!p.cluster_merge || !keys.active || threadIdx.x != 0) return;
  const int active = keys.row.active_splits;
  const int owned = ClusterMergeLayout{p.n_heads / p.n_kv_heads * HD / 32, active}.owned_by(split);
  const uint32_t bar = detail::shared_address(&inbox.full);
  detail::barrier_init(bar, 1);
  detail::barrier_arrive_expect(bar, uint32_t(owned * active) * uint32_t(32 * sizeof(float) + sizeof(float2)));
  detail::fence_barrier_init();
}

// A CTA without keys in a cluster merge: its arrival, so that the others'
// cluster barrier completes. It may exit then.
__device__ __forceinline__ void leave_cluster_merge(const AttnParams& p) {
  if (p.cluster_merge) detail::cluster_arrive();
}

// In place of merge_warps when the splits merge in their cluster (every
// thread of every active split): this split's partial of each block, 4
// values a thread, computed from sm_acc; the cluster barrier; the partials
// pushed to their owners; then the blocks this split owns, once theirs have
// landed, merged and stored (a warp a block).
template <int HD, int kMaxGroup>
__device__ void merge_in_cluster(const AttnParams& p, const float (&sm_m)[kWarps][kMaxGroup],
                                 const float (&sm_l)[kWarps][kMaxGroup], float* sm_acc, int r, int kv_head, int split,
                                 int active_splits, ClusterInbox<HD, kMaxGroup>& inbox) {
  constexpr int kItems = (kMaxGroup * HD / 4 + kWarps * 32 - 1) / (kWarps * 32);  // 4 values each
  const int group = p.n_heads / p.n_kv_heads, A = active_splits;
  const ClusterMergeLayout layout{group * HD / 32, A};
  float4 aa[kItems];
  float2 ml[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int v = 4 * (threadIdx.x + i * kWarps * 32), g = v / HD, e = v % HD;
    if (v >= group * HD) break;
    const WarpsMerged<kMaxGroup> mw(sm_m, sm_l, g);
    aa[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int w = 0; w < kWarps; ++w) {
      const float4 a = *reinterpret_cast<const float4*>(sm_acc + (w * kMaxGroup + g) * HD + e);
      aa[i].x += mw.f[w] * a.x;
      aa[i].y += mw.f[w] * a.y;
      aa[i].z += mw.f[w] * a.z;
      aa[i].w += mw.f[w] * a.w;
    }
    ml[i] = make_float2(mw.m, mw.l);
  }
  // Every CTA has read its sm_acc (the release orders those reads; the K/V
  // stores before it are long complete).
  detail::cluster_arrive();
  detail::cluster_wait();
  auto& acc = *reinterpret_cast<float(*)[ClusterInbox<HD, kMaxGroup>::kSlots][32]>(sm_acc);
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int v = 4 * (threadIdx.x + i * kWarps * 32);
    if (v >= group * HD) break;
    const int b = v / 32, owner = layout.owner(b), slot = layout.slot(b, split);
    const uint32_t bar = detail::cluster_address(detail::shared_address(&inbox.full), owner);
    detail::store_to_cluster(detail::cluster_address(detail::shared_address(&acc[slot][v % 32]), owner), aa[i], bar);
    if (v % 32 == 0)
      detail::store_to_cluster(detail::cluster_address(detail::shared_address(&inbox.ml[slot]), owner), ml[i], bar);
  }

  const int owned = layout.owned_by(split);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp >= owned) return;
  detail::barrier_wait_cluster(detail::shared_address(&inbox.full), 0);
  for (int j = warp; j < owned; j += kWarps) {
    const int b = layout.owned_block(split, j), first = layout.owned_slots(j);
    // Lane s < A: split s's (m, l) and weight 2^(m_s − M).
    const float2 sml = lane < A ? inbox.ml[first + lane] : make_float2(-INFINITY, 0.0f);
    float mm = sml.x;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, off));
    const float w = sml.x == -INFINITY ? 0.0f : exp2f(sml.x - mm);
    float ll = w * sml.y;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ll += __shfl_xor_sync(0xffffffffu, ll, off);
    // Σ_s w_s·acc_s in the combine kernel's order (its thread group g sums
    // splits g, g + G, ...; then the groups are added in turn), so a row
    // has the same bits whichever merges it (RowSplitRule).
    constexpr int G = kCombineThreads / HD;
    float out = 0.0f;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float group_sum = 0.0f;
#pragma unroll
      for (int s = g; s < kMaxClusterSplits; s += G) {
        const float ws = __shfl_sync(0xffffffffu, w, s);
        if (s < A) group_sum += ws * acc[first + s][lane];
      }
      out += group_sum;
    }
    store_output(p, r, int64_t(kv_head * group) * HD + b * 32 + lane, out / ll);
  }
}

// The end of both decode kernels, once their warps' partials are in shared
// memory: merge_in_cluster when the splits merge in their cluster, else
// merge_warps.
template <int HD, int kMaxGroup>
__device__ __forceinline__ void merge_partials(const AttnParams& p, const float (&sm_m)[kWarps][kMaxGroup],
                                               const float (&sm_l)[kWarps][kMaxGroup], float* sm_acc, int r,
                                               int kv_head, int split, const SplitKeys& keys,
                                               ClusterInbox<HD, kMaxGroup>& inbox) {
  if (p.cluster_merge)
    merge_in_cluster<HD, kMaxGroup>(p, sm_m, sm_l, sm_acc, r, kv_head, split, keys.row.active_splits, inbox);
  else
    merge_warps<HD, kMaxGroup>(p, sm_m, sm_l, sm_acc, r, kv_head, split);
}

// A decode attention kernel's dependent launch (launch.cuh) on `grid` (rows ×
// KV heads, splits): with p.cluster_merge each (row, KV head)'s splits are
// one cluster. Clusters of more than 8 CTAs (the portable limit) need the
// kernel's consent, given at its first launch.
template <auto kKernel>
void launch_split_attention(const AttnParams& p, dim3 grid, int threads, size_t smem) {
  static const bool consented = [] {
    CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    return true;
  }();
  (void)consented;
  detail::launch_dependent_in_clusters(kKernel, grid, dim3(1, p.cluster_merge ? grid.y : 1, 1), threads, smem, p);
}

// The tensor-core kernel (attention_decode_mma.cu; attention_decode_mma.h
// says which launches it takes): how many of its CTAs an SM holds (for the
// split count), and its launch on the same grid as the CUDA-core kernel
// (rows × KV heads, splits).
int attention_mma_ctas_per_sm();
void launch_attention_mma(const AttnParams& p, dim3 grid, bool rope);

}  // namespace brioche::cuda::paged
