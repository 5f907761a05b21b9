// Hopper warpgroup matrix products (wgmma, sm_90a) on f16 tiles that sit in
// shared memory in the 128-byte swizzled layout, with f32 accumulators in
// registers (include from .cu files only).
//
// A warpgroup is 4 consecutive warps (128 threads, the first warp index a
// multiple of 4). One wgmma.m64nNk16 computes D[64, N] (+)= A[64, 16]·B[16, N]:
// warp w of the group owns rows 16w..16w+15 of A and D, and its fragments are
// laid out as those of mma.sync.m16n8k16 (mma_tile.cuh), repeated over N in
// tiles of 8 columns: D's n-tile j is d[j][0..3], and two adjacent D tiles are
// the A fragment of a k-step of a following product (mma_tile::c_to_a).
//
// Shared tiles (`swizzled_128b`): rows of 64 16-bit elements (128 bytes); a
// tile of R rows and D columns is D/64 column blocks of R × 64, one after the
// other, and the 16-byte chunk c of a block's row r sits at chunk c ^ (r & 7).
// Eight rows make a 1,024-byte swizzle atom, so every block must start on a
// 1,024-byte boundary. The descriptor of such a block (PTX ISA, "matrix
// descriptor"): start address, the stride between 8-row groups (1,024
// bytes), swizzle mode 128 B. The tensor core applies the XOR itself, from the
// address bits, which is why a k-step inside a block is just its start address
// plus 32 bytes per 16 elements.
//
// Ordering rules (PTX ISA, "asynchronous warpgroup level matrix operations"):
//   - shared memory written through the generic proxy (st.shared, cp.async)
//     must be made visible to the tensor core's async proxy with
//     fence_proxy_async() in each writing thread before the barrier that
//     precedes the wgmma;
//   - wgmma_fence() before the first wgmma of a batch orders the registers
//     (accumulators, register A) that ordinary instructions wrote before it;
//   - a batch is closed by wgmma_commit() and complete after wgmma_wait<0>():
//     until then its accumulators and A registers must not be touched.
#pragma once

#include <cstdint>

namespace brioche::cuda::wgmma {

constexpr int kRowBytes = 128;                   // a row of the swizzled layout
constexpr int kSwizzleRowElems = kRowBytes / 2;  // 16-bit elements per row
constexpr int kAtomBytes = 8 * kRowBytes;        // the swizzle repeats every 8 rows

// Offset in elements of 16-byte chunk `chunk` (0..D/8−1) of row `row` in a
// tile of kTileRows rows and D columns of 16-bit elements, laid out as above.
template <int D, int kTileRows>
__device__ __forceinline__ int swizzled_128b(int row, int chunk) {
  static_assert(D % kSwizzleRowElems == 0 && kTileRows % 8 == 0, "swizzled_128b: whole blocks and atoms");
  const int block = chunk >> 3, c = chunk & 7;
  return block * kTileRows * kSwizzleRowElems + row * kSwizzleRowElems + ((c ^ (row & 7)) << 3);
}

// Matrix descriptor of a 128-byte-swizzled operand starting at shared address
// `addr` (bytes): bits 0–13 address / 16, 16–29 leading byte offset / 16
// (only read for transposed operands wider than one 64-element block; unused
// here, where every product is at most 64 columns of a block), 32–45 the
// 8-row group stride / 16, 62–63 swizzle mode (1 = 128 B).
__device__ __forceinline__ uint64_t descriptor(uint32_t addr) {
  constexpr uint64_t kGroupStride = kAtomBytes >> 4;
  return uint64_t((addr & 0x3FFFF) >> 4) | (kGroupStride << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Pins accumulator registers in place: ordinary code that reads them cannot
// be moved above a preceding wgmma_wait (nor code that writes them below a
// following wgmma issue) by the compiler.
template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i][0]), "+f"(r[i][1]), "+f"(r[i][2]), "+f"(r[i][3])::"memory");
}

// d[64, 64] (+)= a[64, 16]·B[16, 64] for the warpgroup, f16 inputs, f32
// accumulators: a this warp's A fragment (mma.sync layout), B the 16×64 block
// described by desc_b. kTransB = false: B is stored [n][k] (each of the 64
// rows holds its k values: K in S = Q·Kᵀ); true: B is stored [k][n] (V in
// O += P·V). accumulate = false overwrites d.
template <bool kTransB>
__device__ __forceinline__ void mma_m64n64k16(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b,
                                              bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
      "}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)), "n"(kTransB ? 1 : 0));
}

}  // namespace brioche::cuda::wgmma
