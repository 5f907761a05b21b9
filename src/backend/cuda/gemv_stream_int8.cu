// The streamed decode GEMV (gemv_stream.cuh) over Q4_0 and Q8_0 weights,
// against x quantized to int8 per 32-value block (gemv_int8.cuh: dx, sx).
// A tile row holds 64 blocks; consumer thread t owns a quarter q = t % 4 of
// block t / 4: it reads that quarter's int8 x (8 values) and the block's
// (dx, sx) once per tile and multiplies them into all 8 rows with two
// __dp4a each. Blocks of 18 and 34 bytes sit 2-byte aligned in the tile, so
// the weights are read as 16-bit halves.
#include <cuda_fp16.h>

#include "backend/cuda/gemv_int8.cuh"
#include "backend/cuda/gemv_stream.cuh"
#include "core/env_switch.h"

namespace brioche::cuda::detail {

namespace {

using stream::kTileCols;
using stream::kTileRows;

constexpr int kBlocksPerTile = kTileCols / 32;
static_assert(kBlocksPerTile * 4 == stream::kConsumerThreads);

// Words i and i + 1 of 16-bit halves h: h[2i] | h[2i + 1] << 16.
__device__ __forceinline__ uint32_t halves_word(const uint16_t* h, int i) {
  return uint32_t(h[2 * i]) | (uint32_t(h[2 * i + 1]) << 16);
}

template <int kBytes>
struct BlockTile {
  static constexpr int kBlockBytes = kBytes;
  static constexpr int kRowBytes = kBlocksPerTile * kBlockBytes;
  static constexpr int kBudget = 64 << 10, kCtasPerSm = 3;
  using Acts = Int8Acts;
  __device__ static uint32_t row_bytes(int64_t cols) { return uint32_t(cols / 32 * kBytes); }
};

// Q4_0: f16 d, q[16] (byte i: element i low, i + 16 high); w = d·(q − 8), so
// Σ w·x over a block = d·(dx·Σ q·xq − 8·sx). Quarter q holds bytes 4q..4q+3
// (elements 4q.. and 16 + 4q..); the −8·sx term goes with quarter 0.
struct Q4_0Tile : BlockTile<18> {
  struct XShare {
    int lo, hi;          // x of elements 4q.. and 16 + 4q..
    float dx, offset;    // offset: 8·sx for quarter 0, else 0
    bool inside;         // (k is a multiple of 256: whole blocks)
  };
  __device__ static XShare load_x(const Int8Acts& x, int64_t k, int64_t col0) {
    const int b = threadIdx.x / 4, q = threadIdx.x % 4;
    const int64_t col = col0 + 32 * b;
    if (col >= k) return {0, 0, 0.0f, 0.0f, false};
    const int* xq = reinterpret_cast<const int*>(x.q + col);
    const float2 ds = __ldg(x.ds + col / 32);
    return {__ldg(xq + q), __ldg(xq + 4 + q), ds.x, q == 0 ? 8.0f * ds.y : 0.0f, true};
  }
  __device__ static void accumulate(const uint8_t (&tile)[kTileRows][kRowBytes], const XShare& xs,
                                    float (&acc)[kTileRows]) {
    if (!xs.inside) return;
    const int b = threadIdx.x / 4, q = threadIdx.x % 4;
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(tile[i] + kBlockBytes * b);
      const float d = __half2float(__ushort_as_half(h[0]));
      const uint32_t w = halves_word(h + 1, q);
      int s = __dp4a(int(w & 0x0F0F0F0Fu), xs.lo, 0);
      s = __dp4a(int((w >> 4) & 0x0F0F0F0Fu), xs.hi, s);
      acc[i] += d * (float(s) * xs.dx - xs.offset);
    }
  }
};

// Q8_0: f16 d, int8 q[32]; Σ w·x over a block = d·dx·Σ q·xq. Quarter q holds
// elements 8q..8q+7.
struct Q8_0Tile : BlockTile<34> {
  struct XShare {
    int2 xq;
    float dx;
    bool inside;
  };
  __device__ static XShare load_x(const Int8Acts& x, int64_t k, int64_t col0) {
    const int b = threadIdx.x / 4, q = threadIdx.x % 4;
    const int64_t col = col0 + 32 * b;
    if (col >= k) return {{}, 0.0f, false};
    return {__ldg(reinterpret_cast<const int2*>(x.q + col + 8 * q)), __ldg(x.ds + col / 32).x, true};
  }
  __device__ static void accumulate(const uint8_t (&tile)[kTileRows][kRowBytes], const XShare& xs,
                                    float (&acc)[kTileRows]) {
    if (!xs.inside) return;
    const int b = threadIdx.x / 4, q = threadIdx.x % 4;
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(tile[i] + kBlockBytes * b);
      const float d = __half2float(__ushort_as_half(h[0]));
      const int s =
          __dp4a(int(halves_word(h + 1, 2 * q + 1)), xs.xq.y, __dp4a(int(halves_word(h + 1, 2 * q)), xs.xq.x, 0));
      acc[i] += d * xs.dx * float(s);
    }
  }
};

template <class Tile>
void launch(const GemvArgs& a, const Int8Acts& x) {
  if (a.w_up != nullptr) stream::launch<Tile, true, false>(a, x);
  else stream::launch<Tile, false, false>(a, x);
}

}  // namespace

bool gemv_stream_int8_takes(DType wtype, const GemvArgs& a) {
  static const bool on = env_switch_on("BRIOCHE_CUDA_GEMV_STREAM");
  // k a multiple of 256: every tile (a partial last one too) is whole
  // blocks of a multiple of 16 bytes.
  return on && (wtype == DType::Q4_0 || wtype == DType::Q8_0) && a.k % 256 == 0 && stream::launch_fits(a);
}

void gemv_stream_int8(DType wtype, const GemvArgs& a, const Int8Acts& x) {
  BRIOCHE_CHECK(gemv_stream_int8_takes(wtype, a), "gemv_stream_int8: takes one x row of Q4_0/Q8_0 weights of at least ",
                stream::kMinBytes >> 20, " MB, k a multiple of 256, 16-byte aligned rows; got ", dtype_name(wtype),
                ", n ", a.n, ", k ", a.k, ", ", gemv_weight_bytes(a), " weight bytes");
  if (wtype == DType::Q4_0) launch<Q4_0Tile>(a, x);
  else launch<Q8_0Tile>(a, x);
}

}  // namespace brioche::cuda::detail
