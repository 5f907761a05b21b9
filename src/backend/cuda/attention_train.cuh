// Device helpers shared by the training-attention kernels (attention_train.h):
// tile staging (bf16 rows, cp.async, XOR swizzle), mma.sync m16n8k16 in bf16,
// and the block mask (which 64×64 query/key tiles are skipped, fully visible,
// or need the per-element mask).
//
// Tiles: a span's rows are cut into blocks of kBlock = 64 rows from its first
// row. A tile of a block sits in shared memory as kBlock rows of D bf16; the
// 16-byte chunk c of row r is stored at chunk c ^ (r & 7), so the 8 row
// addresses of each ldmatrix phase fall in 8 different bank groups.
//
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4):
//   A[16,16]: a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B[16,8] : b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C[16,8] : c0,c1 (g, 2t..2t+1)  c2,c3 (g+8, 2t..2t+1)
// Two adjacent C tiles (columns 16s..16s+15) are exactly the A fragment of
// k-step s of the next product, so probabilities never leave registers.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

namespace brioche::cuda::train_attention {

constexpr int kBlock = 64;  // rows per query/key tile
constexpr int kWarps = 4;   // 16 rows of a tile per warp
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

using bf16 = __nv_bfloat16;

// One block of a span (uploaded as kBlockInts int32 each).
struct Block {
  int first_row;   // absolute row
  int n_rows;      // 1..kBlock (the span's last block may be short)
  int branch;      // the rows' branch when they all share one, −1 when mixed
  int pos_min;     // positions range (window only; 0 otherwise)
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
  int window;  // 0 = full causal
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

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Offset in elements of 16-byte chunk `chunk` of row `row` (rows of D bf16).
template <int D>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

// 16 bytes global -> shared; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
// 4 bytes global -> shared (through L1); zero-filled when !valid.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
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

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}

// A fragment of rows [row0, row0 + 16), k-step kk, of a swizzled tile.
template <int D>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int row0, int kk) {
  const int lane = threadIdx.x % 32;
  ldmatrix_x4(a, tile + swizzled<D>(row0 + (lane & 15), kk * 2 + (lane >> 4)));
}
// B fragments of C = A·Xᵀ where X is a tile stored [n][D]: n-tiles of rows
// [n0, n0 + 8) (b[0], b[1]) and [n0 + 8, n0 + 16) (b[2], b[3]), k-step kk.
template <int D>
__device__ __forceinline__ void load_b_rows(uint32_t (&b)[4], const bf16* tile, int n0, int kk) {
  const int lane = threadIdx.x % 32;
  ldmatrix_x4(b, tile + swizzled<D>(n0 + (lane & 7) + (lane >> 4) * 8, kk * 2 + ((lane >> 3) & 1)));
}
// B fragments of C = A·X where X is a tile stored [k][D]: k rows
// [k0, k0 + 16), n-tiles of columns [16np, 16np + 8) (b[0], b[1]) and
// [16np + 8, 16np + 16) (b[2], b[3]).
template <int D>
__device__ __forceinline__ void load_b_cols(uint32_t (&b)[4], const bf16* tile, int k0, int np) {
  const int lane = threadIdx.x % 32;
  ldmatrix_x4_trans(b, tile + swizzled<D>(k0 + (lane & 7) + ((lane >> 3) & 1) * 8, np * 2 + (lane >> 4)));
}

// c[16,8] += a[16,16] · b[16,8]
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}

// The A fragment of k-step s from C tiles 2s and 2s + 1 (see the top).
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_bf16x2(c0[0], c0[1]);
  a[1] = pack_bf16x2(c0[2], c0[3]);
  a[2] = pack_bf16x2(c1[0], c1[1]);
  a[3] = pack_bf16x2(c1[2], c1[3]);
}

// 2^x on the SFU (2^−inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The first key block in [from, to] that query block qb does not skip, or to + 1.
__device__ __forceinline__ int next_key_block(const int32_t* blocks, const Block& qb, int from, int to, int window) {
  for (int b = from; b <= to; ++b)
    if (classify(qb, load_block(blocks, b), window) != kSkip) return b;
  return to + 1;
}
// The first query block in [from, to] that does not skip key block kb, or to + 1.
__device__ __forceinline__ int next_query_block(const int32_t* blocks, const Block& kb, int from, int to,
                                                int window) {
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
