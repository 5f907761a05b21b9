// Device helpers shared by the training-attention kernels (attention_train.h):
// tile staging of bf16 rows (the tile primitives, swizzle and fragment
// layouts are in mma_tile.cuh, shared with the prefill kernel), and the
// block mask (which 64×64 query/key tiles are skipped, fully visible, or
// need the per-element mask).
//
// Tiles: a span's rows are cut into blocks of kBlock = 64 rows from its first
// row. A tile of a block sits in shared memory as kBlock rows of D bf16,
// swizzled as mma_tile.cuh describes; mma.sync runs m16n8k16 in bf16.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/mma_tile.cuh"

namespace brioche::cuda::train_attention {

using namespace mma_tile;

constexpr int kBlock = 64;  // rows per query/key tile
constexpr int kWarps = 4;   // 16 rows of a tile per warp
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

using bf16 = __nv_bfloat16;

// One block of a span (uploaded as kBlockInts int32 each).
struct Block {
  int first_row;  // absolute row
  int n_rows;     // 1..kBlock (the span's last block may be short)
  int branch;     // the rows' branch when they all share one, −1 when mixed
  int pos_min;    // positions range (window only; 0 otherwise)
  int pos_max;
  int span_first;  // index of the span's first and last block
  int span_last;
  int pad;
};
constexpr int kBlockInts = 8;

struct Params {
  // bf16 copies, contiguous: q/dout [n, H·D], k/v [n, KV·D]
  const bf16* q;
  const bf16* k;
  const bf16* v;
  const bf16* dout;
  // forward outputs
  float* out;  // [n, H·D], row stride ld_out floats
  float* lse;  // [n, H], row stride ld_lse
  int64_t ld_out, ld_lse;
  // backward inputs (per head, contiguous over rows): [H][n_rows]
  const float* lse2;   // lse · log2 e
  const float* delta;  // D_i = do_i · o_i
  // backward outputs
  float* dq;  // [n, H·D]
  float* dk;  // [n, KV·D]
  float* dv;
  int64_t ld_dq, ld_dk, ld_dv;
  int n_rows;  // rows covered by the row arrays
  int n_heads, n_kv_heads;
  float scale, scale_log2;
  int window;             // 0 = full causal
  const int32_t* blocks;  // [n_blocks][kBlockInts]
  const int32_t* order;   // [n_blocks]: grid y -> block, longest work first
  const int32_t* branch;  // [n_rows] or null (all branch 0)
  const int32_t* pos;     // [n_rows] or null (no window)
};

__device__ __forceinline__ Block load_block(const int32_t* blocks, int b) {
  const int4* p = reinterpret_cast<const int4*>(blocks + size_t(b) * kBlockInts);
  const int4 x = __ldg(p), y = __ldg(p + 1);
  return Block{x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
}

enum TileKind : int { kSkip = 0, kFull = 1, kPartial = 2 };

// How query block qb sees key block kb (kb at or before qb, same span).
// Skipped: the window or the branches hide every pair. Full: every pair is
// visible (both blocks whole, kb entirely before qb, branch 0 or the same
// branch, the whole window inside). Otherwise the per-element mask decides.
__device__ __forceinline__ int classify(const Block& qb, const Block& kb, int window) {
  if (window > 0 && qb.pos_min - kb.pos_max >= window) return kSkip;
  if (kb.branch > 0 && qb.branch >= 0 && qb.branch != kb.branch) return kSkip;
  const bool causal_full = kb.first_row + kb.n_rows <= qb.first_row;
  const bool branch_full = kb.branch == 0 || (kb.branch > 0 && kb.branch == qb.branch);
  const bool window_full = window == 0 || qb.pos_max - kb.pos_min < window;
  const bool whole = qb.n_rows == kBlock && kb.n_rows == kBlock;
  return causal_full && branch_full && window_full && whole ? kFull : kPartial;
}

// Query row i sees key row j (absolute rows of one span; rows past the end
// of their block are invalid and see nothing).
struct RowMask {
  const int32_t* branch;
  const int32_t* pos;
  int window;
  __device__ __forceinline__ bool visible(int i, bool i_valid, int j, bool j_valid) const {
    if (!i_valid || !j_valid || j > i) return false;
    if (branch != nullptr) {
      const int bj = __ldg(branch + j);
      if (bj != 0 && bj != __ldg(branch + i)) return false;
    }
    if (window > 0 && __ldg(pos + i) - __ldg(pos + j) >= window) return false;
    return true;
  }
};

// 4 bytes global -> shared (through L1); zero-filled when !valid.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(dst)), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}
// Queues rows [0, n_rows) of a tile of kRows rows (row r at src + r·row_stride,
// D bf16 each) into dst; rows n_rows..kRows−1 are zero-filled. Does not commit.
template <int D, int kRows = kBlock>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, int64_t row_stride, int n_rows) {
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int i = threadIdx.x; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = r < n_rows;
    cp_async_16(dst + swizzled<D>(r, c), src + (valid ? int64_t(r) * row_stride + c * 8 : 0), valid);
  }
}

// This thread's two rows of block b's tile (rows g and g + 8 of the warp's
// 16, g = lane / 4): the absolute row, and whether the block has it.
__device__ __forceinline__ void thread_rows(const Block& b, int warp, int g, int (&row)[2], bool (&valid)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp * 16 + g + 8 * i;
    row[i] = b.first_row + r;
    valid[i] = r < b.n_rows;
  }
}

// The first key block in [from, to] that query block qb does not skip, or to + 1.
__device__ __forceinline__ int next_key_block(const int32_t* blocks, const Block& qb, int from, int to, int window) {
  for (int b = from; b <= to; ++b)
    if (classify(qb, load_block(blocks, b), window) != kSkip) return b;
  return to + 1;
}
// The first query block in [from, to] that does not skip key block kb, or to + 1.
__device__ __forceinline__ int next_query_block(const int32_t* blocks, const Block& kb, int from, int to, int window) {
  for (int b = from; b <= to; ++b)
    if (classify(load_block(blocks, b), kb, window) != kSkip) return b;
  return to + 1;
}

// Launchers (attention_train_forward.cu, attention_train_backward.cu); the
// metadata in Params is already on the device.
void launch_forward(const Params& p, int head_dim, int n_blocks);
void launch_backward_dq(const Params& p, int head_dim, int n_blocks);
void launch_backward_dkdv(const Params& p, int head_dim, int n_blocks);

}  // namespace brioche::cuda::train_attention
