// attend_any_dim (attention_any_dim.cuh): paged attention of any head_dim up
// to 512 and any GQA group, a simple kernel for the shapes the fast ones do
// not take. A CTA takes one (row, query head); warp w takes the row's keys
// first + w, first + w + 4, ...; lane i holds values i, i + 32, ... of q,
// of each key's K and V row and of the accumulator. Online softmax in base
// 2 (q pre-scaled by scale·log2 e), per warp:
//   m' = max(m, s);  l' = l·2^(m−m') + 2^(s−m');  acc' = acc·2^(m−m') + 2^(s−m')·v
// then out = Σ_w 2^(m_w−M) acc_w / Σ_w 2^(m_w−M) l_w over the 4 warps.
#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/attention_any_dim.cuh"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace brioche::cuda::paged {

namespace {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

// NJ values of head_dim per lane: head_dim ≤ 32·NJ.
template <typename KV, int NJ>
__global__ void __launch_bounds__(kWarps * 32) attention_any_dim_kernel(AttnParams p) {
  const int r = int(blockIdx.x / unsigned(p.n_heads)), h = int(blockIdx.x % unsigned(p.n_heads));
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int seq = row_sequence(p, r);
  if (seq < 0) return;  // a row no sequence covers: untouched
  const int hd = p.head_dim;
  const int kv_head = h / (p.n_heads / p.n_kv_heads);
  const RowKeys keys = row_keys(p, r);
  const int32_t* table = row_table(p, seq);

  float q[NJ], acc[NJ];
  const float* qr = p.q + int64_t(r) * p.q_stride + int64_t(h) * hd;
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    const int d = lane + 32 * j;
    q[j] = d < hd ? qr[d] * p.scale_log2 : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const KV* k_cache = static_cast<const KV*>(p.k);
  const KV* v_cache = static_cast<const KV*>(p.v);
  for (int key = keys.first + warp; key <= keys.pos; key += kWarps) {
    const int64_t block = table[key / p.block_size];
    const int64_t at = ((block * p.block_size + key % p.block_size) * p.n_kv_heads + kv_head) * hd;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) s += q[j] * to_float(k_cache[at + d]);
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float m_new = fmaxf(m, s);
    const float correction = exp2f(m - m_new), weight = exp2f(s - m_new);
    l = l * correction + weight;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int d = lane + 32 * j;
      acc[j] = acc[j] * correction + (d < hd ? weight * to_float(v_cache[at + d]) : 0.0f);
    }
    m = m_new;
  }

  __shared__ float sm_m[kWarps], sm_l[kWarps];
  __shared__ float sm_acc[kWarps][32 * NJ];
  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < NJ; ++j) sm_acc[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  float big = -INFINITY;
  for (int w = 0; w < kWarps; ++w) big = fmaxf(big, sm_m[w]);
  float scale[kWarps], total = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    scale[w] = sm_m[w] == -INFINITY ? 0.0f : exp2f(sm_m[w] - big);  // a warp without keys adds nothing
    total += scale[w] * sm_l[w];
  }
  for (int d = int(threadIdx.x); d < hd; d += kWarps * 32) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += scale[w] * sm_acc[w][d];
    store_output(p, r, int64_t(h) * hd + d, o / total);
  }
}

template <typename KV>
void launch(const AttnParams& p) {
  const unsigned grid = unsigned(p.n_rows) * unsigned(p.n_heads);
  const cudaStream_t s = detail::current_stream();
  if (p.head_dim <= 32)
    attention_any_dim_kernel<KV, 1><<<grid, kWarps * 32, 0, s>>>(p);
  else if (p.head_dim <= 64)
    attention_any_dim_kernel<KV, 2><<<grid, kWarps * 32, 0, s>>>(p);
  else if (p.head_dim <= 128)
    attention_any_dim_kernel<KV, 4><<<grid, kWarps * 32, 0, s>>>(p);
  else if (p.head_dim <= 256)
    attention_any_dim_kernel<KV, 8><<<grid, kWarps * 32, 0, s>>>(p);
  else
    attention_any_dim_kernel<KV, 16><<<grid, kWarps * 32, 0, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attend_any_dim(const AttnParams& p, bool f16_cache) {
  BRIOCHE_CHECK(p.head_dim >= 1 && p.head_dim <= kAnyDimMaxHeadDim, "paged_attention (cuda): head_dim ", p.head_dim,
                " outside 1..", kAnyDimMaxHeadDim);
  BRIOCHE_CHECK(p.splits == 1 && p.new_k == nullptr && p.int8.q == nullptr, "paged_attention (cuda): head_dim ",
                p.head_dim, " with ", p.n_heads / p.n_kv_heads,
                " query heads per KV head runs on the plain kernel, which takes neither splits, RoPE nor an int8 "
                "output");
  if (p.n_rows == 0) return;
  if (f16_cache)
    launch<__half>(p);
  else
    launch<float>(p);
}

}  // namespace brioche::cuda::paged
