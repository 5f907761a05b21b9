// Training attention backward on tensor cores (see attention_train.h), from
// the saved lse (FA2 style; P recomputed, never stored):
//   P = 2^(scale·log2 e · Q·Kᵀ − lse·log2 e),  dP = dO·Vᵀ,  dS = P ∘ (dP − D)
//   dV = Pᵀ·dO,  dK = scale · dSᵀ·Q,  dQ = scale · dS·K
// Two passes, no atomics, so the gradients are deterministic (the same bits
// every run, as segmented recompute and accumulation tests want):
//   * dq pass: CTA = (query head, query block), 4 warps × 16 query rows,
//     walks the key blocks it sees (K/V double-buffered by cp.async):
//     3 products per tile (Q·Kᵀ, dO·Vᵀ, dS·K).
//   * dk/dv pass: CTA = (KV head, key block), 4 warps × 16 key rows (K and V
//     staged once), walks the query heads of its GQA group × the query
//     blocks that see it (Q/dO double-buffered): 4 products per tile
//     (K·Qᵀ, V·dOᵀ, Pᵀ·dO, dSᵀ·Q), computed transposed so that Pᵀ and dSᵀ
//     stay in registers as A fragments. The GQA group sums in registers.
// Atomics in f32 for dq (one pass of 5 products) would cost 2 fewer products
// per tile but make dq order-dependent and need an f32 [n, H·d] accumulator
// zeroed and read back; the separate pass recomputes Q·Kᵀ and dO·Vᵀ instead.
#include "backend/cuda/attention_train.cuh"
#include "backend/cuda/cuda_check.h"

namespace brioche::cuda::train_attention {

namespace {

// CTAs per SM the registers are capped for (170 registers at 3, 255 at 2).
// The dq pass runs 3 at D = 128 by walking keys in sub-tiles of 32 (64 KB of
// shared memory; H200, 8B shape: 4.38 -> 3.81 ms against 2 CTAs on whole
// blocks); the dk/dv pass holds 128 accumulator registers at D = 128, so 2
// (96 KB). At D = 64 both passes run 2 with whole-block steps: 3 CTAs with
// 168 registers (small spills) made the SmolLM2 backward 2.24 -> 2.37 ms.
constexpr int kDkDvCtas = 2;
template <int D>
constexpr int kDqCtas = D == 128 ? 3 : 2;
// Keys per K/V sub-tile of the dq pass: a key block is walked in
// kBlock / kDqKeys steps.
template <int D>
constexpr int kDqKeys = D == 128 ? kBlock / 2 : kBlock;

template <int D>
__global__ void __launch_bounds__(kThreads, kDqCtas<D>) dq_kernel(Params p) {
  constexpr int kDSteps = D / 16;
  constexpr int kKeys = kDqKeys<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sk = reinterpret_cast<bf16*>(smem);  // [2][kKeys][D]
  bf16* sv = sk + 2 * kKeys * D;             // [2][kKeys][D]
  bf16* sq = sv + 2 * kKeys * D;             // [kBlock][D]
  bf16* sdo = sq + kBlock * D;               // [kBlock][D]

  const int h = blockIdx.x;
  const int qbi = p.order[blockIdx.y];
  const Block qb = load_block(p.blocks, qbi);
  const int kv_head = h / (p.n_heads / p.n_kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t q_stride = int64_t(p.n_heads) * D, kv_stride = int64_t(p.n_kv_heads) * D;
  const RowMask mask{p.branch, p.pos, p.window};

  // Queues sub-tile `sub` of key block kb into buffer `buf` (not committed).
  auto load_keys = [&](const Block& kb, int sub, int buf) {
    const int64_t row0 = int64_t(kb.first_row + sub * kKeys) * kv_stride + kv_head * D;
    const int rows = min(kKeys, kb.n_rows - sub * kKeys);
    load_tile<D, kKeys>(sk + buf * kKeys * D, p.k + row0, kv_stride, rows);
    load_tile<D, kKeys>(sv + buf * kKeys * D, p.v + row0, kv_stride, rows);
  };

  int kbi = next_key_block(p.blocks, qb, qb.span_first, qbi, p.window), sub = 0;
  Block kb = load_block(p.blocks, kbi);
  load_tile<D>(sq, p.q + int64_t(qb.first_row) * q_stride + h * D, q_stride, qb.n_rows);
  load_tile<D>(sdo, p.dout + int64_t(qb.first_row) * q_stride + h * D, q_stride, qb.n_rows);
  load_keys(kb, 0, 0);
  cp_async_commit();

  int qrow[2];
  bool qvalid[2];
  float lse2[2], delta[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp * 16 + g + 8 * i;
    qrow[i] = qb.first_row + r;
    qvalid[i] = r < qb.n_rows;
    lse2[i] = qvalid[i] ? p.lse2[int64_t(h) * p.n_rows + qrow[i]] : INFINITY;  // invalid rows: P = 0
    delta[i] = qvalid[i] ? p.delta[int64_t(h) * p.n_rows + qrow[i]] : 0.0f;
  }

  float dq[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

  for (int buf = 0; kbi <= qbi; buf ^= 1) {
    // The next sub-tile: the rest of this block, else the next visible block.
    int next = kbi, next_sub = sub + 1;
    Block next_kb = kb;
    if (next_sub * kKeys >= kb.n_rows) {
      next = next_key_block(p.blocks, qb, kbi + 1, qbi, p.window);
      next_sub = 0;
      if (next <= qbi) next_kb = load_block(p.blocks, next);
    }
    if (next <= qbi) {
      load_keys(next_kb, next_sub, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* kt = sk + buf * kKeys * D;
    const bf16* vt = sv + buf * kKeys * D;

    // S = Q·Kᵀ and dP = dO·Vᵀ, [16, kKeys] per warp.
    float s[kKeys / 8][4], dp[kKeys / 8][4];
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kDSteps; ++kk) {
      uint32_t aq[4], ado[4];
      load_a<D>(aq, sq, warp * 16, kk);
      load_a<D>(ado, sdo, warp * 16, kk);
#pragma unroll
      for (int np = 0; np < kKeys / 16; ++np) {
        uint32_t b[4];
        load_b_rows<D>(b, kt, np * 16, kk);
        mma_16816<bf16>(s[2 * np], aq, b[0], b[1]);
        mma_16816<bf16>(s[2 * np + 1], aq, b[2], b[3]);
        load_b_rows<D>(b, vt, np * 16, kk);
        mma_16816<bf16>(dp[2 * np], ado, b[0], b[1]);
        mma_16816<bf16>(dp[2 * np + 1], ado, b[2], b[3]);
      }
    }
    // dS = P ∘ (dP − D), in place of dP.
    const bool partial = classify(qb, kb, p.window) == kPartial;
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[j][e] * p.scale_log2 - lse2[e >> 1];
        if (partial) {
          const int c = sub * kKeys + 8 * j + 2 * t4 + (e & 1);  // key row in the block
          if (!mask.visible(qrow[e >> 1], qvalid[e >> 1], kb.first_row + c, c < kb.n_rows)) x = -INFINITY;
        }
        dp[j][e] = fast_exp2(x) * (dp[j][e] - delta[e >> 1]);
      }
    // dQ[16, D] += dS[16, kKeys] · K[kKeys, D]
    uint32_t a[4], b_dq[4];  // fragment registers (see mma_tile.cuh)
    mma_add_c_times_x<D>(dq, dp, kt, a, b_dq);
    __syncthreads();  // the next iteration's loads overwrite this buffer
    kbi = next;
    sub = next_sub;
    kb = next_kb;
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!qvalid[i]) continue;
    // dQ = scale · dS·K
    store_row(p.dq + int64_t(qrow[i]) * p.ld_dq + int64_t(h) * D + 2 * t4, dq, i, p.scale);
  }
}

// Queues query block qb of head h: Q and dO tiles, lse2 and D rows, by
// cp.async in one group. Rows past the block are zero-filled; every element
// that reads them is masked (a short block is always a partial tile).
template <int D>
__device__ __forceinline__ void load_query_block(const Params& p, const Block& qb, int h, bf16* sq, bf16* sdo,
                                                 float* slse2, float* sdelta) {
  const int64_t q_stride = int64_t(p.n_heads) * D;
  load_tile<D>(sq, p.q + int64_t(qb.first_row) * q_stride + h * D, q_stride, qb.n_rows);
  load_tile<D>(sdo, p.dout + int64_t(qb.first_row) * q_stride + h * D, q_stride, qb.n_rows);
  if (threadIdx.x < kBlock) {
    const int r = threadIdx.x;
    const bool valid = r < qb.n_rows;
    const int64_t at = valid ? int64_t(h) * p.n_rows + qb.first_row + r : 0;
    cp_async_4(slse2 + r, p.lse2 + at, valid);
    cp_async_4(sdelta + r, p.delta + at, valid);
  }
  cp_async_commit();
}

template <int D>
__global__ void __launch_bounds__(kThreads, kDkDvCtas) dkdv_kernel(Params p) {
  constexpr int kDSteps = D / 16;
  // Query rows per sub-step: at D = 128 half a block (halves the S/dP
  // registers beside the 128 of the dK/dV accumulators).
  constexpr int kHalf = D == 64 ? kBlock : kBlock / 2;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sk = reinterpret_cast<bf16*>(smem);                       // [kBlock][D]
  bf16* sv = sk + kBlock * D;                                     // [kBlock][D]
  bf16* sq = sv + kBlock * D;                                     // [2][kBlock][D]
  bf16* sdo = sq + 2 * kBlock * D;                                // [2][kBlock][D]
  float* slse2 = reinterpret_cast<float*>(sdo + 2 * kBlock * D);  // [2][kBlock]
  float* sdelta = slse2 + 2 * kBlock;                             // [2][kBlock]

  const int kv_head = blockIdx.x;
  const int group = p.n_heads / p.n_kv_heads;
  const int kbi = p.order[blockIdx.y];
  const Block kb = load_block(p.blocks, kbi);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t kv_stride = int64_t(p.n_kv_heads) * D;
  const RowMask mask{p.branch, p.pos, p.window};

  // This thread's two key rows: g and g + 8 of the warp's 16.
  int krow[2];
  bool kvalid[2];
  thread_rows(kb, warp, g, krow, kvalid);

  load_tile<D>(sk, p.k + int64_t(kb.first_row) * kv_stride + kv_head * D, kv_stride, kb.n_rows);
  load_tile<D>(sv, p.v + int64_t(kb.first_row) * kv_stride + kv_head * D, kv_stride, kb.n_rows);
  // (head index in the group, query block): the diagonal block is never skipped.
  int hi = 0, qbi = kbi;
  Block qb = load_block(p.blocks, qbi);
  load_query_block<D>(p, qb, kv_head * group, sq, sdo, slse2, sdelta);  // commits K, V with it

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;

  for (int buf = 0; hi < group; buf ^= 1) {
    int next_hi = hi, next_qbi = next_query_block(p.blocks, kb, qbi + 1, kb.span_last, p.window);
    if (next_qbi > kb.span_last) {
      ++next_hi;
      next_qbi = kbi;
    }
    Block next_qb{};
    if (next_hi < group) {
      next_qb = load_block(p.blocks, next_qbi);
      load_query_block<D>(p, next_qb, kv_head * group + next_hi, sq + (buf ^ 1) * kBlock * D,
                          sdo + (buf ^ 1) * kBlock * D, slse2 + (buf ^ 1) * kBlock, sdelta + (buf ^ 1) * kBlock);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* qt = sq + buf * kBlock * D;
    const bf16* dot = sdo + buf * kBlock * D;
    const float* lse2 = slse2 + buf * kBlock;
    const float* delta = sdelta + buf * kBlock;
    const bool partial = classify(qb, kb, p.window) == kPartial;

#pragma unroll
    for (int half = 0; half < kBlock / kHalf; ++half) {
      // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, [16 keys, kHalf queries] per warp.
      float s[kHalf / 8][4], dp[kHalf / 8][4];
#pragma unroll
      for (int j = 0; j < kHalf / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kDSteps; ++kk) {
        uint32_t ak[4], av[4];
        load_a<D>(ak, sk, warp * 16, kk);
        load_a<D>(av, sv, warp * 16, kk);
#pragma unroll
        for (int np = 0; np < kHalf / 16; ++np) {
          uint32_t b[4];
          load_b_rows<D>(b, qt, half * kHalf + np * 16, kk);
          mma_16816<bf16>(s[2 * np], ak, b[0], b[1]);
          mma_16816<bf16>(s[2 * np + 1], ak, b[2], b[3]);
          load_b_rows<D>(b, dot, half * kHalf + np * 16, kk);
          mma_16816<bf16>(dp[2 * np], av, b[0], b[1]);
          mma_16816<bf16>(dp[2 * np + 1], av, b[2], b[3]);
        }
      }
      // Pᵀ in s, dSᵀ = Pᵀ ∘ (dPᵀ − D) in dp.
#pragma unroll
      for (int j = 0; j < kHalf / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = half * kHalf + 8 * j + 2 * t4 + (e & 1);  // query row in the block
          float x = s[j][e] * p.scale_log2 - lse2[c];
          if (partial && !mask.visible(qb.first_row + c, c < qb.n_rows, krow[e >> 1], kvalid[e >> 1])) x = -INFINITY;
          s[j][e] = fast_exp2(x);
          dp[j][e] = s[j][e] * (dp[j][e] - delta[c]);
        }
        // dV[16, D] += Pᵀ[16, kHalf] · dO[kHalf, D];  dK[16, D] += dSᵀ[16, kHalf] · Q[kHalf, D]
#pragma unroll
      for (int ks = 0; ks < kHalf / 16; ++ks) {
        uint32_t ap[4], ads[4];
        c_to_a<bf16>(ap, s[2 * ks], s[2 * ks + 1]);
        c_to_a<bf16>(ads, dp[2 * ks], dp[2 * ks + 1]);
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
          uint32_t b[4];
          load_b_cols<D>(b, dot, half * kHalf + ks * 16, np);
          mma_16816<bf16>(dv[2 * np], ap, b[0], b[1]);
          mma_16816<bf16>(dv[2 * np + 1], ap, b[2], b[3]);
          load_b_cols<D>(b, qt, half * kHalf + ks * 16, np);
          mma_16816<bf16>(dk[2 * np], ads, b[0], b[1]);
          mma_16816<bf16>(dk[2 * np + 1], ads, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's loads overwrite this buffer
    hi = next_hi;
    qbi = next_qbi;
    qb = next_qb;
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!kvalid[i]) continue;
    float* dkr = p.dk + int64_t(krow[i]) * p.ld_dk + int64_t(kv_head) * D + 2 * t4;
    float* dvr = p.dv + int64_t(krow[i]) * p.ld_dv + int64_t(kv_head) * D + 2 * t4;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      dkr[8 * n] = dk[n][2 * i] * p.scale;
      dkr[8 * n + 1] = dk[n][2 * i + 1] * p.scale;
      dvr[8 * n] = dv[n][2 * i];
      dvr[8 * n + 1] = dv[n][2 * i + 1];
    }
  }
}

template <int D>
void launch_dq(const Params& p, int n_blocks) {
  // K, V sub-tiles double-buffered; Q, dO
  constexpr size_t kSmem = size_t(4 * kDqKeys<D> + 2 * kBlock) * D * sizeof(bf16);
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
    return true;
  }();
  (void)configured;
  dq_kernel<D><<<dim3(unsigned(p.n_heads), unsigned(n_blocks)), kThreads, kSmem, detail::current_stream()>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <int D>
void launch_dkdv(const Params& p, int n_blocks) {
  // K, V; Q, dO double-buffered; lse2 and D rows double-buffered.
  constexpr size_t kSmem = size_t(6 * kBlock) * D * sizeof(bf16) + 4 * kBlock * sizeof(float);
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
    return true;
  }();
  (void)configured;
  dkdv_kernel<D><<<dim3(unsigned(p.n_kv_heads), unsigned(n_blocks)), kThreads, kSmem, detail::current_stream()>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_backward_dq(const Params& p, int head_dim, int n_blocks) {
  if (head_dim == 64)
    launch_dq<64>(p, n_blocks);
  else
    launch_dq<128>(p, n_blocks);
}

void launch_backward_dkdv(const Params& p, int head_dim, int n_blocks) {
  if (head_dim == 64)
    launch_dkdv<64>(p, n_blocks);
  else
    launch_dkdv<128>(p, n_blocks);
}

}  // namespace brioche::cuda::train_attention
