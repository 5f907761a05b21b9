// Training attention forward on tensor cores (see attention_train.h).
//
// CTA = (query head h, query block qb); 4 warps, warp w owns rows
// [16w, 16w + 16) of the block. For each key block kb of the span up to qb
// that the mask does not skip (classify):
//   S = Q·Kᵀ · scale·log2 e     [16, 64] per warp (mma.sync, bf16 in, f32 acc)
//   m' = max(m, rowmax S);  P = 2^(S − m');  l' = l·2^(m − m') + rowsum P
//   O' = O·2^(m − m') + P·V    (P rounded to bf16 as the A operand)
// then out = O / l and lse = (m + log2 l)·ln 2 (natural log, as the CPU op).
// K and V tiles come by cp.async into a double buffer (tile t+1 loads while
// tile t computes); Q is staged in the second K buffer and held as A
// fragments in registers. Masks are evaluated per element only on tiles
// classify() marks partial (diagonal, branch and window boundaries).

#include "backend/cuda/attention_train.cuh"
#include "backend/cuda/cuda_check.h"
#include "core/env_switch.h"

namespace brioche::cuda::train_attention {

namespace {

// kMinCtas CTAs per SM: 3 caps registers at 170 per thread (64 KB of shared
// memory each at D = 128), as the prefill kernel found best.
template <int D, int kMinCtas>
__global__ void __launch_bounds__(kThreads, kMinCtas) forward_kernel(Params p) {
  constexpr int kDSteps = D / 16;  // k-steps of S = Q·Kᵀ
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sk = reinterpret_cast<bf16*>(smem);  // [2][kBlock][D]
  bf16* sv = sk + 2 * kBlock * D;            // [2][kBlock][D]
  bf16* sq = sk + kBlock * D;                // [kBlock][D]: K buffer 1 until the loop starts

  const int h = blockIdx.x;
  const int qbi = p.order[blockIdx.y];
  const Block qb = load_block(p.blocks, qbi);
  const int kv_head = h / (p.n_heads / p.n_kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t q_stride = int64_t(p.n_heads) * D, kv_stride = int64_t(p.n_kv_heads) * D;
  const RowMask mask{p.branch, p.pos, p.window};

  int kbi = next_key_block(p.blocks, qb, qb.span_first, qbi, p.window);  // ≤ qbi: the diagonal is never skipped
  Block kb = load_block(p.blocks, kbi);
  load_tile<D>(sk, p.k + int64_t(kb.first_row) * kv_stride + kv_head * D, kv_stride, kb.n_rows);
  load_tile<D>(sv, p.v + int64_t(kb.first_row) * kv_stride + kv_head * D, kv_stride, kb.n_rows);
  load_tile<D>(sq, p.q + int64_t(qb.first_row) * q_stride + h * D, q_stride, qb.n_rows);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t qf[kDSteps][4];  // this warp's 16 rows as A fragments
#pragma unroll
  for (int kk = 0; kk < kDSteps; ++kk) load_a<D>(qf[kk], sq, warp * 16, kk);
  __syncthreads();  // K buffer 1 is free again

  // This thread's two rows: g and g + 8 of the warp's 16.
  int qrow[2];
  bool qvalid[2];
  thread_rows(qb, warp, g, qrow, qvalid);

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int buf = 0; kbi <= qbi; buf ^= 1) {
    const int next = next_key_block(p.blocks, qb, kbi + 1, qbi, p.window);
    Block next_kb{};
    if (next <= qbi) {
      next_kb = load_block(p.blocks, next);
      bf16* nk = sk + (buf ^ 1) * kBlock * D;
      bf16* nv = sv + (buf ^ 1) * kBlock * D;
      load_tile<D>(nk, p.k + int64_t(next_kb.first_row) * kv_stride + kv_head * D, kv_stride, next_kb.n_rows);
      load_tile<D>(nv, p.v + int64_t(next_kb.first_row) * kv_stride + kv_head * D, kv_stride, next_kb.n_rows);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* kt = sk + buf * kBlock * D;
    const bf16* vt = sv + buf * kBlock * D;

    // S[16, 64] = Q·Kᵀ: n-tile j covers keys 8j .. 8j + 7 of the block.
    float s[kBlock / 8][4];
    uint32_t b_s[4];  // fragment registers (see mma_tile.cuh)
    mma_a_times_xt<D>(s, qf, kt, b_s);
    const bool partial = classify(qb, kb, p.window) == kPartial;
#pragma unroll
    for (int j = 0; j < kBlock / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] *= p.scale_log2;
        if (partial) {
          const int c = 8 * j + 2 * t4 + (e & 1);
          if (!mask.visible(qrow[e >> 1], qvalid[e >> 1], kb.first_row + c, c < kb.n_rows)) s[j][e] = -INFINITY;
        }
      }

    // m, l updated, P = 2^(S − m') in place of S, O rescaled (mma_tile.cuh);
    // then O[16, D] += P[16, 64] · V[64, D].
    online_softmax_step(s, o, m, l);
    uint32_t a[4], b[4];
    mma_add_c_times_x<D>(o, s, vt, a, b);
    __syncthreads();  // the next iteration's loads overwrite this buffer
    kbi = next;
    kb = next_kb;
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] = quad_sum(l[i]);
    if (!qvalid[i]) continue;
    const float inv = 1.0f / l[i];  // l ≥ 1: a row always sees its own key
    // out = O / l
    store_row(p.out + int64_t(qrow[i]) * p.ld_out + int64_t(h) * D + 2 * t4, o, i, inv);
    if (t4 == 0) p.lse[int64_t(qrow[i]) * p.ld_lse + h] = (m[i] + log2f(l[i])) * kLn2;
  }
}

template <int D, int kMinCtas>
void launch(const Params& p, int n_blocks) {
  constexpr size_t kSmem = size_t(4 * kBlock) * D * sizeof(bf16);  // double-buffered K, V (Q staged in K)
  static const bool configured = [] {
    CUDA_CHECK(
        cudaFuncSetAttribute(forward_kernel<D, kMinCtas>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
    return true;
  }();
  (void)configured;
  const dim3 grid{unsigned(p.n_heads), unsigned(n_blocks), 1u};
  forward_kernel<D, kMinCtas><<<grid, kThreads, kSmem, detail::current_stream()>>>(p);
  CUDA_CHECK_LAUNCH();
}

// BRIOCHE_CUDA_TRAIN_ATTENTION_CTAS=2 builds for 2 CTAs per SM (A/B runs).
int min_ctas() {
  static const int ctas = env_int("BRIOCHE_CUDA_TRAIN_ATTENTION_CTAS", 3) == 2 ? 2 : 3;
  return ctas;
}

}  // namespace

void launch_forward(const Params& p, int head_dim, int n_blocks) {
  const bool three = min_ctas() == 3;
  if (head_dim == 64)
    three ? launch<64, 3>(p, n_blocks) : launch<64, 2>(p, n_blocks);
  else
    three ? launch<128, 3>(p, n_blocks) : launch<128, 2>(p, n_blocks);
}

}  // namespace brioche::cuda::train_attention
