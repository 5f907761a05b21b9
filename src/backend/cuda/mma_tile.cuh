// Tensor-core tile primitives shared by the attention kernels
// (attention_prefill.cu in f16, attention_train_*.cu in bf16): shared-memory
// tiles staged by cp.async with an XOR swizzle, ldmatrix, mma.sync
// m16n8k16 with f32 accumulators, and the online-softmax blocks built on them.
//
// Tiles: a tile sits in shared memory as rows of D 16-bit elements (T = __half
// or __nv_bfloat16); the 16-byte chunk c of row r is stored at chunk
// c ^ (r & 7), so the 8 row addresses of each ldmatrix phase fall in 8
// different bank groups.
//
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4):
//   A[16,16]: a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B[16,8] : b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C[16,8] : c0,c1 (g, 2t..2t+1)  c2,c3 (g+8, 2t..2t+1)
// A thread thus holds two rows of every C tile: row g in c[0..1] and row g + 8
// in c[2..3] (row i ∈ {0, 1} at c[2i], c[2i + 1]). Two adjacent C tiles
// (columns 16s..16s+15) are exactly the A fragment of k-step s of the next
// product, so probabilities never leave registers (c_to_a).
//
// The product helpers (mma_a_times_xt, mma_add_c_times_x) take their fragment
// registers a, b from the caller: arrays declared inside an inlined helper
// land ahead of the kernel's own locals, which renumbers the PTX registers and
// reorders ptxas's output. Declared where the loops written out declared
// them, the kernels compile to the same SASS (checked with cuobjdump -sass).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace brioche::cuda::mma_tile {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Offset in elements of 16-byte chunk `chunk` of row `row` (rows of D 16-bit
// elements, 8 per chunk), swizzled as described at the top.
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
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8×8 16-bit matrices: lanes 8i..8i+7 give the row addresses of matrix
// i, and r[i] receives this lane's element pair of matrix i (row lane / 4,
// columns 2·(lane % 4)..+1): with the addresses of load_a, an A fragment.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}
// The same with every 8×8 matrix transposed (B fragments of a [k][n] tile).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}

// A fragment of rows [row0, row0 + 16), k-step kk (columns 16kk..16kk+15),
// of a swizzled tile.
template <int D, typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int row0, int kk) {
  const int lane = threadIdx.x % 32;
  ldmatrix_x4(a, tile + swizzled<D>(row0 + (lane & 15), kk * 2 + (lane >> 4)));
}
// B fragments of C = A·Xᵀ where X is a tile stored [n][D]: n-tiles of rows
// [n0, n0 + 8) (b[0], b[1]) and [n0 + 8, n0 + 16) (b[2], b[3]), k-step kk.
template <int D, typename T>
__device__ __forceinline__ void load_b_rows(uint32_t (&b)[4], const T* tile, int n0, int kk) {
  const int lane = threadIdx.x % 32;
  ldmatrix_x4(b, tile + swizzled<D>(n0 + (lane & 7) + (lane >> 4) * 8, kk * 2 + ((lane >> 3) & 1)));
}
// B fragments of C = A·X where X is a tile stored [k][D]: k rows
// [k0, k0 + 16), n-tiles of columns [16np, 16np + 8) (b[0], b[1]) and
// [16np + 8, 16np + 16) (b[2], b[3]).
template <int D, typename T>
__device__ __forceinline__ void load_b_cols(uint32_t (&b)[4], const T* tile, int k0, int np) {
  const int lane = threadIdx.x % 32;
  ldmatrix_x4_trans(b, tile + swizzled<D>(k0 + (lane & 7) + ((lane >> 3) & 1) * 8, np * 2 + (lane >> 4)));
}

// c[16,8] += a[16,16] · b[16,8], A and B in T (__half or __nv_bfloat16), C in f32.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "mma_16816: f16 or bf16 inputs");
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T, lo in the low 16 bits (the element of the lower
// column in an A fragment register).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "pack2: f16 or bf16");
  uint32_t u;
  if constexpr (std::is_same_v<T, __half>) {
    __half2 h = __floats2half2_rn(lo, hi);  // .x (low 16 bits) = lo
    memcpy(&u, &h, 4);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
    memcpy(&u, &h, 4);
  }
  return u;
}

// The A fragment of k-step s, rounded to T, from C tiles 2s and 2s + 1 (see the top).
template <typename T>
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}

// 2^x on the SFU (2^−inf = 0); the softmax passes S − max ≤ 0, far from overflow.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// S[16, 8·kNTiles] = A·Xᵀ for one warp: A its 16 rows as A fragments in
// registers (k-steps 0..kDSteps−1, D = 16·kDSteps), X a tile stored [n][D]
// (n-tile j of S covers rows 8j..8j+7 of X). b: the caller's B fragment
// registers (see the note at the top).
template <int D, typename T, int kDSteps, int kNTiles>
__device__ __forceinline__ void mma_a_times_xt(float (&s)[kNTiles][4], const uint32_t (&a)[kDSteps][4], const T* tile,
                                               uint32_t (&b)[4]) {
  static_assert(D == 16 * kDSteps && kNTiles % 2 == 0, "mma_a_times_xt: whole k-steps and n-tile pairs");
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < kDSteps; ++kk) {
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      load_b_rows<D>(b, tile, np * 16, kk);
      mma_16816<T>(s[2 * np], a[kk], b[0], b[1]);
      mma_16816<T>(s[2 * np + 1], a[kk], b[2], b[3]);
    }
  }
}

// acc[16, D] += C[16, 8·kCTiles] · X[8·kCTiles, D] for one warp: C f32
// accumulator tiles in registers (rounded to T as A fragments, c_to_a), X
// rows [0, 8·kCTiles) of a tile stored [k][D]. In attention: O += P·V,
// dQ += dS·K. a, b: the caller's fragment registers (see the note at the top).
template <int D, typename T, int kCTiles>
__device__ __forceinline__ void mma_add_c_times_x(float (&acc)[D / 8][4], const float (&c)[kCTiles][4], const T* tile,
                                                  uint32_t (&a)[4], uint32_t (&b)[4]) {
  static_assert(kCTiles % 2 == 0, "mma_add_c_times_x: whole k-steps of 16");
#pragma unroll
  for (int ks = 0; ks < kCTiles / 2; ++ks) {
    c_to_a<T>(a, c[2 * ks], c[2 * ks + 1]);
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      load_b_cols<D>(b, tile, ks * 16, np);
      mma_16816<T>(acc[2 * np], a, b[0], b[1]);
      mma_16816<T>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// The A fragments of a product whose reduction runs over the 8 · kNTiles
// columns of C (c_to_a per k-step of 16): P of P·V.
template <typename T, int kNTiles>
__device__ __forceinline__ void c_to_a_tiles(uint32_t (&a)[kNTiles / 2][4], const float (&c)[kNTiles][4]) {
#pragma unroll
  for (int ks = 0; ks < kNTiles / 2; ++ks) c_to_a<T>(a[ks], c[2 * ks], c[2 * ks + 1]);
}

// The max and the sum over a row's quad (the 4 threads that hold its columns).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Row i ∈ {0, 1} of this thread (row g or g + 8) of accumulator tiles
// acc[16, 8·kNTiles], times `scale`: its columns 8n + 2t and 8n + 2t + 1 of
// every n-tile n, to dst[8n] and dst[8n + 1] (dst = the row's column 2t).
template <int kNTiles>
__device__ __forceinline__ void store_row(float* dst, const float (&acc)[kNTiles][4], int i, float scale) {
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) {
    dst[8 * n] = acc[n][2 * i] * scale;
    dst[8 * n + 1] = acc[n][2 * i + 1] * scale;
  }
}
// The same values rounded to 16 bits (nearest even), a pair per store.
template <int kNTiles>
__device__ __forceinline__ void store_row(__nv_bfloat16* dst, const float (&acc)[kNTiles][4], int i, float scale) {
#pragma unroll
  for (int n = 0; n < kNTiles; ++n)
    *reinterpret_cast<__nv_bfloat162*>(dst + 8 * n) =
        __floats2bfloat162_rn(acc[n][2 * i] * scale, acc[n][2 * i + 1] * scale);
}
template <int kNTiles>
__device__ __forceinline__ void store_row(__half* dst, const float (&acc)[kNTiles][4], int i, float scale) {
#pragma unroll
  for (int n = 0; n < kNTiles; ++n)
    *reinterpret_cast<__half2*>(dst + 8 * n) = __floats2half2_rn(acc[n][2 * i] * scale, acc[n][2 * i + 1] * scale);
}

// One online-softmax step over a tile of scores for this thread's two rows
// (base-2 units, masked scores −inf); a row's 4 threads (one quad) share m:
//   m' = max(m, rowmax S);  P = 2^(S − m');  l' = l·2^(m − m') + rowsum P;
//   O' = O·2^(m − m')
// P replaces S in place. l is this thread's columns only: the quad sums it
// once at the end.
template <int kNTiles, int kOTiles>
__device__ __forceinline__ void online_softmax_step(float (&s)[kNTiles][4], float (&o)[kOTiles][4], float (&m)[2],
                                                    float (&l)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float mx = m[i];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * i], s[j][2 * i + 1]));
    mx = quad_max(mx);
    const float base = mx == -INFINITY ? 0.0f : mx;  // all masked so far: keep zeros, not NaN
    const float corr = fast_exp2(m[i] - base);
    m[i] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      s[j][2 * i] = fast_exp2(s[j][2 * i] - base);
      s[j][2 * i + 1] = fast_exp2(s[j][2 * i + 1] - base);
      sum += s[j][2 * i] + s[j][2 * i + 1];
    }
    l[i] = l[i] * corr + sum;
#pragma unroll
    for (int n = 0; n < kOTiles; ++n) {
      o[n][2 * i] *= corr;
      o[n][2 * i + 1] *= corr;
    }
  }
}

}  // namespace brioche::cuda::mma_tile
