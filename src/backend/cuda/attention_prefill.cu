// Prefill attention on tensor cores (see attention_prefill.h).
//
// CTA = (query head h, tile of kRows = 64 query rows of one sequence); 4 warps,
// warp w owns rows [16w, 16w + 16). Per key tile of kKeys = 64 keys:
//   S = Q·Kᵀ            [16, 64] per warp (f16 in, f32 acc)
//   m' = max(m, rowmax S);  P = 2^(S − m');  l' = l·2^(m − m') + rowsum P
//   O' = O·2^(m − m') + P·V   (P rounded to f16 as the product's A operand)
// and at the end out = O / l. Q is pre-scaled by scale·log2(e) before its f16
// rounding, so S is already in base-2 units (as in attention.cu).
//
// Two kernels from one template, with the same data flow and the same
// fragment layouts, differing in the products:
//   - kWgmma (head_dim 128): the 4 warps are one warpgroup; each product is
//     a chain of wgmma.m64n64k16 (wgmma.cuh), with Q's (S) and P's (P·V) A
//     fragments in registers and K and V read by the tensor cores through
//     descriptors of 128-byte-swizzled shared tiles. One wgmma instruction
//     does what 16 mma.sync and 8 ldmatrix did: ncu on the Llama-3-8B shape,
//     140 µs a call against 187 µs.
//   - mma.sync m16n8k16 with ldmatrix'd B fragments (head_dim 64, and 128
//     with BRIOCHE_CUDA_PREFILL_WGMMA=0).
//
// Data movement: Q (f32 activations) is scaled, rounded and staged once in
// shared memory (the second K buffer, free until the key loop starts), then
// held as A fragments in registers. K and V tiles are gathered from the
// paged cache (slot = table[key / block_size]·block_size + key % block_size)
// with 16-byte cp.async into a double buffer: tile t+1 loads while tile t
// computes. Shared rows are XOR-swizzled by 16-byte chunk (chunk c of row r
// at c ^ (r & 7)): for mma.sync rows of D halves, so the 8 row addresses of
// each ldmatrix phase fall in 8 bank groups; for wgmma column blocks of 64
// halves, the layout its 128-byte swizzle mode reads.
//
// The swizzle, the fragment layouts and the online-softmax step are in
// mma_tile.cuh (shared with the training attention): two adjacent C tiles of
// S (keys 16j..16j+15) are exactly P's A fragment for the k-step j of P·V, so
// P never leaves registers (wgmma's accumulator and register-A fragments are
// mma.sync's, repeated over the warpgroup's 4 warps).
#include <cuda_fp16.h>

#include <algorithm>
#include <bit>
#include <vector>

#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/mma_tile.cuh"
#include "backend/cuda/wgmma.cuh"
#include "core/env_switch.h"

namespace brioche::cuda {

namespace {

using namespace mma_tile;

constexpr int kRows = 64;  // query rows per CTA
constexpr int kKeys = 64;  // keys per shared-memory tile
constexpr int kWarps = kRows / 16;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;

struct PrefillParams {
  const float* q;  // [n_rows, n_heads * D], row stride q_stride floats
  float* out;      // same layout, row stride out_stride
  int64_t q_stride, out_stride;
  const __half* k;  // [n_blocks, block_size, n_kv_heads, D]
  const __half* v;
  int n_heads, n_kv_heads;
  int block_shift;     // log2(block_size)
  float scale_log2;    // scale · log2(e)
  int sliding_window;  // 0 = full causal
  // Device metadata (one upload): tiles[n_tiles][2] = (sequence, first row
  // within it); seqs[n_seqs][4] = (first_row, n_rows, n_past, table offset);
  // tables = the block tables, concatenated.
  const int32_t* tiles;
  const int32_t* seqs;
  const int32_t* tables;
  // With out16.rows set, the output goes there instead of out: 16-bit rows
  // [n_rows, n_heads · D] contiguous (kernels.h).
  AttentionOut16 out16;
};

// Offset in elements of 16-byte chunk c of row r of a [64][D] shared tile:
// mma_tile's swizzle for the mma.sync kernel, the 128-byte swizzled blocks
// the tensor core's descriptors read for the wgmma one (wgmma.cuh).
template <int D, bool kWgmma>
__device__ __forceinline__ int tile_offset(int r, int c) {
  if constexpr (kWgmma)
    return wgmma::swizzled_128b<D, kKeys>(r, c);
  else
    return swizzled<D>(r, c);
}

// Queues the K and V rows of keys [key0, key0 + kKeys) into one buffer; keys
// at or past key_end are zero-filled (no table entry covers them).
template <int D, bool kWgmma>
__device__ __forceinline__ void load_kv_tile(const PrefillParams& p, const int32_t* table, int kv_head, int key0,
                                             int key_end, __half* sk, __half* sv) {
  constexpr int kChunks = D / 8;
  const int64_t slot_elems = int64_t(p.n_kv_heads) * D;
#pragma unroll
  for (int i = threadIdx.x; i < kKeys * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const int key = key0 + r;
    const bool valid = key < key_end;
    int64_t off = 0;
    if (valid) {
      const int64_t block = table[key >> p.block_shift];
      const int in_block = key & ((1 << p.block_shift) - 1);
      off = ((block << p.block_shift) + in_block) * slot_elems + int64_t(kv_head) * D + c * 8;
    }
    cp_async_16(sk + tile_offset<D, kWgmma>(r, c), p.k + off, valid);
    cp_async_16(sv + tile_offset<D, kWgmma>(r, c), p.v + off, valid);
  }
  cp_async_commit();
}

// Issues S[64, 64] = Q·Kᵀ for the CTA's warpgroup as one wgmma group (s is
// written when the group completes): a wgmma per 16 of D, Q from this warp's
// A fragments, K through descriptors of the tile's column blocks.
template <int D>
__device__ __forceinline__ void wgmma_q_times_kt(float (&s)[kKeys / 8][4], const uint32_t (&qf)[D / 16][4],
                                                 const __half* kt) {
  const uint32_t k_addr = shared_address(kt);
  wgmma::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    // Block kk / 4 (64 columns), 32 bytes per k-step inside it.
    const uint32_t addr = k_addr + (kk / 4) * kKeys * wgmma::kRowBytes + (kk % 4) * 32;
    wgmma::mma_m64n64k16<false>(s, qf[kk], wgmma::descriptor(addr), kk > 0);
  }
  wgmma::wgmma_commit();
}

// Issues O[64, D] += P[64, 64]·V[64, D] as one wgmma group (o and pf are the
// tensor cores' until it completes): P as f16 A fragments (mma_tile::c_to_a),
// V through descriptors of 16 keys × one 64-column block (transposed: V is
// stored [key][d]).
template <int D>
__device__ __forceinline__ void wgmma_p_times_v(float (&o)[D / 8][4], const uint32_t (&pf)[kKeys / 16][4],
                                                const __half* vt) {
  const uint32_t v_addr = shared_address(vt);
  wgmma::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kKeys / 16; ++ks)
#pragma unroll
    for (int b = 0; b < D / 64; ++b) {
      float(&o_block)[8][4] = *reinterpret_cast<float(*)[8][4]>(&o[8 * b]);
      const uint32_t addr = v_addr + b * kKeys * wgmma::kRowBytes + ks * 16 * wgmma::kRowBytes;
      wgmma::mma_m64n64k16<true>(o_block, pf[ks], wgmma::descriptor(addr), true);
    }
  wgmma::wgmma_commit();
}

// Three CTAs (12 warps) per SM: 64 KB of shared memory each at D = 128 (65
// for wgmma), and at most 170 registers per thread. The mma.sync kernel is
// latency bound (ncu on the Llama-3-8B shape: tensor pipe 29% busy, 6.6
// cycles per issued instruction per warp); 3 CTAs per SM instead of 2 made
// it 1.2x faster, 32-key tiles at 4 CTAs per SM (Q re-read from shared
// memory) and skipping masked 16-key steps on the diagonal tile were slower.
// The wgmma kernel waits for each product before the next step; what was
// tried to overlap them lost (docs/perf-log/cuda-prefill.md#prefill-wgmma-attention): Q read from shared
// memory at 2 CTAs per SM (160 µs against 140), V single-buffered to keep 3
// CTAs with Q in shared memory (0.83 of the mma.sync kernel's time, against
// 0.75), and FlashAttention-3's order (S(t) while O is rescaled, P·V(t − 1)
// while the softmax of S(t) runs) at 2 CTAs per SM (0.94): ptxas placed the
// wait for P·V(t − 1) above the softmax's exponentials.
template <int D, bool kWgmma>
__global__ void __launch_bounds__(kThreads, 3) prefill_attention_kernel(PrefillParams p) {
  constexpr int kChunks = D / 8;   // 16-byte chunks per shared row
  constexpr int kDSteps = D / 16;  // k-steps of S = Q·Kᵀ
  static_assert(kRows == kKeys, "Q is staged in the second K buffer (a [kKeys][D] tile)");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = smem_raw;
  if constexpr (kWgmma)  // the swizzle atoms need 1,024-byte aligned blocks (launch asks 1 KB more)
    smem += (wgmma::kAtomBytes - shared_address(smem_raw) % wgmma::kAtomBytes) % wgmma::kAtomBytes;
  __half* sk = reinterpret_cast<__half*>(smem);  // [2][kKeys][D]
  __half* sv = sk + 2 * kKeys * D;               // [2][kKeys][D]
  __half* sq = sk + kKeys * D;                   // [kRows][D]: K buffer 1 until the loop starts

  const int h = blockIdx.x;
  const int seq = p.tiles[2 * blockIdx.y], row0 = p.tiles[2 * blockIdx.y + 1];
  const int first_row = p.seqs[4 * seq], seq_rows = p.seqs[4 * seq + 1], n_past = p.seqs[4 * seq + 2];
  const int32_t* table = p.tables + p.seqs[4 * seq + 3];
  const int kv_head = h / (p.n_heads / p.n_kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t4 = lane & 3;

  const int rows_here = min(kRows, seq_rows - row0);
  const int pos0 = n_past + row0;             // position of the tile's first row
  const int pos_last = pos0 + rows_here - 1;  // and of its last
  const int window = p.sliding_window;
  const int key_begin = window > 0 ? max(0, pos0 - window + 1) : 0;
  const int key_end = pos_last + 1;
  const int tile0 = key_begin / kKeys * kKeys;
  const int n_tiles = (key_end - tile0 + kKeys - 1) / kKeys;

  load_kv_tile<D, kWgmma>(p, table, kv_head, tile0, key_end, sk, sv);

  // Q: f32 -> ·scale·log2 e -> f16, into shared memory (rows past the
  // sequence are zeros).
  for (int i = threadIdx.x; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    uint32_t packed[4] = {0, 0, 0, 0};
    if (r < rows_here) {
      const float* src = p.q + int64_t(first_row + row0 + r) * p.q_stride + int64_t(h) * D + c * 8;
#pragma unroll
      for (int j = 0; j < 4; ++j) packed[j] = pack2<__half>(src[2 * j] * p.scale_log2, src[2 * j + 1] * p.scale_log2);
    }
    *reinterpret_cast<uint4*>(sq + tile_offset<D, kWgmma>(r, c)) =
        make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
  __syncthreads();
  uint32_t qf[kDSteps][4];  // this warp's 16 rows as A fragments
#pragma unroll
  for (int kk = 0; kk < kDSteps; ++kk)
    ldmatrix_x4(qf[kk], sq + tile_offset<D, kWgmma>(warp * 16 + (lane & 15), kk * 2 + (lane >> 4)));
  __syncthreads();  // K buffer 1 is free again

  // This thread's two rows (g and g + 8 of the warp's 16); rows past the
  // sequence borrow the last row's position (computed, never written).
  int qpos[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) qpos[i] = pos0 + min(warp * 16 + g + 8 * i, rows_here - 1);

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int t = 0; t < n_tiles; ++t) {
    const int key0 = tile0 + t * kKeys;
    const int buf = t & 1;
    if (t + 1 < n_tiles) {
      load_kv_tile<D, kWgmma>(p, table, kv_head, key0 + kKeys, key_end, sk + (buf ^ 1) * kKeys * D,
                              sv + (buf ^ 1) * kKeys * D);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    if constexpr (kWgmma) wgmma::fence_proxy_async();  // cp.async wrote what the tensor cores read
    __syncthreads();
    const __half* kt = sk + buf * kKeys * D;
    const __half* vt = sv + buf * kKeys * D;

    // S[16, 64] = Q·Kᵀ (this warp's rows): n-tile j covers keys key0 + 8j .. + 7.
    float s[kKeys / 8][4];
    if constexpr (kWgmma) {
      wgmma_q_times_kt<D>(s, qf, kt);
      wgmma::wgmma_wait<0>();
      wgmma::fence_operands(s);
    } else {
      uint32_t b_s[4];  // fragment registers (see mma_tile.cuh)
      mma_a_times_xt<D>(s, qf, kt, b_s);
    }

    // Causal and window masks, only on tiles that cross a boundary.
    const bool crosses = key0 + kKeys - 1 > pos0 || (window > 0 && key0 < pos_last - window + 1);
    if (crosses) {
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + 8 * j + 2 * t4 + (e & 1);
          const int q = qpos[e >> 1];
          if (key > q || (window > 0 && key <= q - window)) s[j][e] = -INFINITY;
        }
    }

    // m, l updated, P = 2^(S − m') in place of S, O rescaled (mma_tile.cuh);
    // then O[16, D] += P[16, 64] · V[64, D] (P rounded to f16).
    online_softmax_step(s, o, m, l);
    if constexpr (kWgmma) {
      uint32_t pf[kKeys / 16][4];
      c_to_a_tiles<__half>(pf, s);
      wgmma_p_times_v<D>(o, pf, vt);
      wgmma::wgmma_wait<0>();
      wgmma::fence_operands(o);
    } else {
      uint32_t a[4], b[4];
      mma_add_c_times_x<D>(o, s, vt, a, b);
    }
    __syncthreads();  // the next iteration's loads overwrite this buffer
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] = quad_sum(l[i]);
    const int r = warp * 16 + g + 8 * i;
    if (r >= rows_here) continue;
    const float inv = 1.0f / l[i];  // l ≥ 1: a row always sees its own key
    // out = O / l
    const int64_t row = first_row + row0 + r, col = int64_t(h) * D + 2 * t4;
    if (p.out16.rows == nullptr)
      store_row(p.out + row * p.out_stride + col, o, i, inv);
    else if (p.out16.f16)
      store_row(static_cast<__half*>(p.out16.rows) + row * p.n_heads * D + col, o, i, inv);
    else
      store_row(static_cast<__nv_bfloat16*>(p.out16.rows) + row * p.n_heads * D + col, o, i, inv);
  }
}

template <int D, bool kWgmma>
void launch(const PrefillParams& p, int n_tiles) {
  // Double-buffered K and V (Q staged in K); wgmma: room to align them to 1 KB.
  constexpr size_t kSmem = size_t(4 * kKeys) * D * sizeof(__half) + (kWgmma ? wgmma::kAtomBytes : 0);
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<D, kWgmma>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(kSmem)));
    return true;
  }();
  (void)configured;
  const dim3 grid{unsigned(p.n_heads), unsigned(n_tiles), 1u};
  prefill_attention_kernel<D, kWgmma><<<grid, kThreads, kSmem, detail::current_stream()>>>(p);
  CUDA_CHECK_LAUNCH();
}

// head_dim 128 takes the wgmma kernel (BRIOCHE_CUDA_PREFILL_WGMMA=0: the
// mma.sync one, for A/B runs). head_dim 64 stays on mma.sync: there ptxas
// 13.0 gives the registers of Q's fragments, which every trip's first wgmma
// reads, to the P fragments inside the loop (seen in the SASS; the prefill
// test's head_dim-64 cases failed with NMSE 0.2–0.45), and hiding them from
// it did not help.
template <int D>
void launch(const PrefillParams& p, int n_tiles) {
  if constexpr (D == 128) {
    static const bool wgmma = env_switch_on("BRIOCHE_CUDA_PREFILL_WGMMA");
    if (wgmma) return launch<D, true>(p, n_tiles);
  }
  launch<D, false>(p, n_tiles);
}

bool prefill_kernel_enabled() {
  static const bool enabled = env_switch_on("BRIOCHE_CUDA_PREFILL_ATTENTION");
  return enabled;
}

}  // namespace

bool prefill_attention_takes(const backend::cpu::PagedAttentionArgs& a, const backend::cpu::KvSequence& seq) {
  return a.cache.f16 && (a.head_dim == 64 || a.head_dim == 128) && a.n_kv_heads > 0 && a.cache.block_size > 0 &&
         std::has_single_bit(unsigned(a.cache.block_size)) && a.n_heads % a.n_kv_heads == 0 &&
         seq.n_rows >= kPrefillMinRows && prefill_kernel_enabled();
}

std::vector<backend::cpu::KvSequence> prefill_attention(const backend::cpu::PagedAttentionArgs& a,
                                                        AttentionOut16 out16) {
  std::vector<backend::cpu::KvSequence> rest;
  // Metadata layout of the upload: tiles, then seqs, then tables (PrefillParams).
  struct Tile {
    int32_t seq, row0, work;  // work: keys the tile's last row sees
  };
  std::vector<Tile> tiles;
  std::vector<int32_t> seqs, tables;
  for (int s = 0; s < a.n_sequences; ++s) {
    const backend::cpu::KvSequence& seq = a.sequences[s];
    if (!prefill_attention_takes(a, seq)) {
      rest.push_back(seq);
      continue;
    }
    const int32_t index = int32_t(seqs.size() / 4);
    for (int32_t row0 = 0; row0 < seq.n_rows; row0 += kRows) {
      const int32_t last = seq.n_past + std::min(seq.n_rows, row0 + kRows) - 1;
      const int32_t work = a.sliding_window > 0 ? std::min(last + 1, a.sliding_window + kRows) : last + 1;
      tiles.push_back({index, row0, work});
    }
    seqs.insert(seqs.end(), {seq.first_row, seq.n_rows, seq.n_past, int32_t(tables.size())});
    tables.insert(tables.end(), seq.block_table, seq.block_table + seq.n_table_blocks);
  }
  if (tiles.empty()) return rest;
  BRIOCHE_CHECK(tiles.size() <= 65535, "prefill_attention (cuda): at most 65535 tiles of ", kRows,
                " rows per call (grid y), got ", tiles.size());
  // Longest tiles first: the grid's tail is then short tiles.
  std::stable_sort(tiles.begin(), tiles.end(), [](const Tile& x, const Tile& y) { return x.work > y.work; });
  std::vector<int32_t> meta;
  meta.reserve(2 * tiles.size() + seqs.size() + tables.size());
  for (const Tile& t : tiles) meta.insert(meta.end(), {t.seq, t.row0});
  meta.insert(meta.end(), seqs.begin(), seqs.end());
  meta.insert(meta.end(), tables.begin(), tables.end());
  const auto* dmeta = static_cast<const int32_t*>(upload_cached(meta.data(), meta.size() * 4));

  const PrefillParams p{.q = a.q,
                        .out = a.out,
                        .q_stride = a.q_stride,
                        .out_stride = a.out_stride,
                        .k = static_cast<const __half*>(a.cache.k),
                        .v = static_cast<const __half*>(a.cache.v),
                        .n_heads = a.n_heads,
                        .n_kv_heads = a.n_kv_heads,
                        .block_shift = std::countr_zero(unsigned(a.cache.block_size)),
                        .scale_log2 = a.scale * kLog2e,
                        .sliding_window = a.sliding_window,
                        .tiles = dmeta,
                        .seqs = dmeta + 2 * tiles.size(),
                        .tables = dmeta + 2 * tiles.size() + seqs.size(),
                        .out16 = out16};
  if (a.head_dim == 64)
    launch<64>(p, int(tiles.size()));
  else
    launch<128>(p, int(tiles.size()));
  return rest;
}

}  // namespace brioche::cuda
