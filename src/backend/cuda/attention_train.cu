// Host side of the training attention (attention_train.h): the block list and
// row metadata uploaded once per call, bf16 staging copies of the inputs, and
// the backward's per-row prologue (D_i = do_i·o_i, lse in base 2).
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "backend/cuda/attention_train.cuh"
#include "backend/cuda/attention_train.h"
#include "backend/cuda/cuda_check.h"

namespace brioche::cuda {

using train_attention::bf16;
using train_attention::kBlock;
using train_attention::kBlockInts;

namespace {

// out[r, c] = bf16(x[r, c]) for r < n, c < k (k a multiple of 4): 4 values per
// thread, one 16-byte load when the rows allow it.
__global__ void to_bf16_kernel(const float* x, int64_t ldx, int64_t n, int64_t k, bf16* out, bool vector_loads) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i >= n * k) return;
  const int64_t r = i / k, c = i % k;
  const float* src = x + r * ldx + c;
  float4 v;
  if (vector_loads)
    v = *reinterpret_cast<const float4*>(src);
  else
    v = make_float4(src[0], src[1], src[2], src[3]);
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 packed;
  memcpy(&packed.x, &lo, 4);
  memcpy(&packed.y, &hi, 4);
  *reinterpret_cast<uint2*>(out + i) = packed;
}

// A contiguous bf16 copy [n, k] of f32 rows (row stride ld floats).
std::shared_ptr<void> to_bf16(const float* x, int64_t ld, int64_t n, int64_t k) {
  auto out = allocate(size_t(n * k) * sizeof(bf16));
  const int64_t threads = n * k / 4;
  if (threads > 0) {
    const bool vector_loads = ld % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    to_bf16_kernel<<<unsigned((threads + 255) / 256), 256, 0, detail::current_stream()>>>(
        x, ld, n, k, static_cast<bf16*>(out.get()), vector_loads);
    CUDA_CHECK_LAUNCH();
  }
  return out;
}

// Per (row, head), one warp: delta[h][row] = Σ_c dout·out (f32),
// lse2[h][row] = lse·log2 e, and dout rounded to bf16 [n, H·D].
template <int D>
__global__ void backward_prologue_kernel(const float* dout, int64_t ld_dout, const float* out, int64_t ld_out,
                                         const float* lse, int64_t ld_lse, int n_rows, int n_heads, bf16* dout16,
                                         float* delta, float* lse2) {
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= int64_t(n_rows) * n_heads) return;
  const int row = int(w / n_heads), h = int(w % n_heads);
  const float* d = dout + row * ld_dout + h * D;
  const float* o = out + row * ld_out + h * D;
  bf16* d16 = dout16 + (int64_t(row) * n_heads + h) * D;
  float sum = 0.0f;
#pragma unroll
  for (int c = lane * 2; c < D; c += 64) {
    const float d0 = d[c], d1 = d[c + 1];
    sum += d0 * o[c] + d1 * o[c + 1];
    *reinterpret_cast<__nv_bfloat162*>(d16 + c) = __floats2bfloat162_rn(d0, d1);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) {
    delta[int64_t(h) * n_rows + row] = sum;
    lse2[int64_t(h) * n_rows + row] = lse[row * ld_lse + h] * train_attention::kLog2e;
  }
}

// The layout as device metadata: the blocks, two launch orders and the row
// arrays, in one upload (blocks first: they are read as int4).
struct DeviceLayout {
  int n_rows = 0;  // rows [0, n_rows) cover every span
  int n_blocks = 0;
  const int32_t* blocks = nullptr;
  const int32_t* query_order = nullptr;  // forward, dq: most key blocks first
  const int32_t* key_order = nullptr;    // dk/dv: most query blocks first
  const int32_t* branch = nullptr;
  const int32_t* pos = nullptr;
};

DeviceLayout upload_layout(const ops::DenseAttentionLayout& layout, int window, const char* op) {
  DeviceLayout dl;
  for (const auto& s : layout.spans) dl.n_rows = std::max(dl.n_rows, s.first_row + s.n_rows);
  std::vector<int32_t> blocks, query_work, key_work;
  for (const auto& s : layout.spans) {
    if (s.n_rows <= 0) continue;
    const int first = int(blocks.size() / kBlockInts);
    const int last = first + (s.n_rows + kBlock - 1) / kBlock - 1;
    for (int r0 = 0; r0 < s.n_rows; r0 += kBlock) {
      const int row0 = s.first_row + r0, rows = std::min(kBlock, s.n_rows - r0);
      int branch = layout.branch.empty() ? 0 : layout.branch[size_t(row0)];
      int pos_min = 0, pos_max = 0;
      if (window > 0) pos_min = pos_max = layout.positions[size_t(row0)];
      for (int r = row0; r < row0 + rows; ++r) {
        if (!layout.branch.empty() && layout.branch[size_t(r)] != branch) branch = -1;
        if (window > 0) {
          pos_min = std::min(pos_min, layout.positions[size_t(r)]);
          pos_max = std::max(pos_max, layout.positions[size_t(r)]);
        }
      }
      const int index = int(blocks.size() / kBlockInts);
      blocks.insert(blocks.end(), {row0, rows, branch, pos_min, pos_max, first, last, 0});
      query_work.push_back(index - first + 1);
      key_work.push_back(last - index + 1);
    }
  }
  dl.n_blocks = int(blocks.size() / kBlockInts);
  BRIOCHE_CHECK(dl.n_blocks <= 65535, op, " (cuda): at most 65535 blocks of ", kBlock, " rows per call, got ",
                dl.n_blocks);
  if (dl.n_blocks == 0) return dl;
  auto by_work = [&](const std::vector<int32_t>& work) {
    std::vector<int32_t> order(work.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return work[a] > work[b]; });
    return order;
  };
  std::vector<int32_t> meta = std::move(blocks);
  const size_t query_at = meta.size();
  const auto qo = by_work(query_work);
  meta.insert(meta.end(), qo.begin(), qo.end());
  const size_t key_at = meta.size();
  const auto ko = by_work(key_work);
  meta.insert(meta.end(), ko.begin(), ko.end());
  const size_t branch_at = meta.size();
  if (!layout.branch.empty()) meta.insert(meta.end(), layout.branch.begin(), layout.branch.begin() + dl.n_rows);
  const size_t pos_at = meta.size();
  if (window > 0) meta.insert(meta.end(), layout.positions.begin(), layout.positions.begin() + dl.n_rows);
  const auto* d = static_cast<const int32_t*>(upload_cached(meta.data(), meta.size() * sizeof(int32_t)));
  dl.blocks = d;
  dl.query_order = d + query_at;
  dl.key_order = d + key_at;
  if (!layout.branch.empty()) dl.branch = d + branch_at;
  if (window > 0) dl.pos = d + pos_at;
  return dl;
}

void check_head_dim(int head_dim, const char* op) {
  BRIOCHE_CHECK(dense_attention_supports(head_dim), op, " (cuda): head_dim ", head_dim,
                " is not supported; the CUDA training attention takes head_dim 64 or 128");
}

// q, k, v rounded to bf16 for the kernels, contiguous: q [n_rows, H·d],
// k and v [n_rows, KV·d].
struct Bf16Qkv {
  std::shared_ptr<void> q, k, v;
};
Bf16Qkv qkv_to_bf16(const backend::cpu::DenseAttentionArgs& a, int n_rows) {
  const auto& p = a.params;
  return {.q = to_bf16(a.q, a.ld_q, n_rows, int64_t(p.n_heads) * p.head_dim),
          .k = to_bf16(a.k, a.ld_k, n_rows, int64_t(p.n_kv_heads) * p.head_dim),
          .v = to_bf16(a.v, a.ld_v, n_rows, int64_t(p.n_kv_heads) * p.head_dim)};
}

// What the forward and backward launches share: the bf16 inputs, the shape,
// the scale and the uploaded layout.
train_attention::Params base_params(const backend::cpu::DenseAttentionArgs& a, const DeviceLayout& dl,
                                    const Bf16Qkv& qkv) {
  const auto& p = a.params;
  return {.q = static_cast<const bf16*>(qkv.q.get()),
          .k = static_cast<const bf16*>(qkv.k.get()),
          .v = static_cast<const bf16*>(qkv.v.get()),
          .n_rows = dl.n_rows,
          .n_heads = p.n_heads,
          .n_kv_heads = p.n_kv_heads,
          .scale = p.scale,
          .scale_log2 = p.scale * train_attention::kLog2e,
          .window = p.sliding_window,
          .blocks = dl.blocks,
          .branch = dl.branch,
          .pos = dl.pos};
}

}  // namespace

bool dense_attention_supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

void dense_attention(const backend::cpu::DenseAttentionArgs& a) {
  const auto& pr = a.params;
  check_head_dim(pr.head_dim, "dense_attention");
  const DeviceLayout dl = upload_layout(a.layout, pr.sliding_window, "dense_attention");
  if (dl.n_blocks == 0) return;
  const int d = pr.head_dim;
  const Bf16Qkv qkv = qkv_to_bf16(a, dl.n_rows);
  train_attention::Params p = base_params(a, dl, qkv);
  p.out = a.out_w;
  p.lse = a.lse_w;
  p.ld_out = a.ld_out;
  p.ld_lse = a.ld_lse;
  p.order = dl.query_order;
  train_attention::launch_forward(p, d, dl.n_blocks);
}

void dense_attention_backward(const backend::cpu::DenseAttentionArgs& a) {
  const auto& pr = a.params;
  check_head_dim(pr.head_dim, "dense_attention_backward");
  const DeviceLayout dl = upload_layout(a.layout, pr.sliding_window, "dense_attention_backward");
  if (dl.n_blocks == 0) return;
  const int d = pr.head_dim;
  const Bf16Qkv qkv = qkv_to_bf16(a, dl.n_rows);
  const int64_t row_heads = int64_t(dl.n_rows) * pr.n_heads;
  auto dout16 = allocate(size_t(row_heads * d) * sizeof(bf16));
  auto delta = allocate(size_t(row_heads) * sizeof(float));  // [H][n_rows]
  auto lse2 = allocate(size_t(row_heads) * sizeof(float));   // [H][n_rows]
  {
    const unsigned grid = unsigned((row_heads * 32 + 255) / 256);
    auto* dout_bf16 = static_cast<bf16*>(dout16.get());
    auto* delta_rows = static_cast<float*>(delta.get());
    auto* lse2_rows = static_cast<float*>(lse2.get());
    auto* prologue = d == 64 ? backward_prologue_kernel<64> : backward_prologue_kernel<128>;
    prologue<<<grid, 256, 0, detail::current_stream()>>>(a.dout, a.ld_dout, a.out, a.ld_out, a.lse, a.ld_lse, dl.n_rows,
                                                         pr.n_heads, dout_bf16, delta_rows, lse2_rows);
    CUDA_CHECK_LAUNCH();
  }
  train_attention::Params p = base_params(a, dl, qkv);
  p.dout = static_cast<const bf16*>(dout16.get());
  p.lse2 = static_cast<const float*>(lse2.get());
  p.delta = static_cast<const float*>(delta.get());
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv = a.dv;
  p.ld_dq = a.ld_dq;
  p.ld_dk = a.ld_dk;
  p.ld_dv = a.ld_dv;
  p.order = dl.query_order;
  train_attention::launch_backward_dq(p, d, dl.n_blocks);
  p.order = dl.key_order;
  train_attention::launch_backward_dkdv(p, d, dl.n_blocks);
}

}  // namespace brioche::cuda
