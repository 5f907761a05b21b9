// Decode GEMV over bf16/f16 weights for launches of many MB (one x row): the
// weights stream into shared memory through the bulk copy engine, several
// stages ahead of the arithmetic.
//
// Why: the warp-per-row kernel (gemv_dense.cu) holds a warp's loads in
// registers, four 16-byte loads per lane in flight, and its occupancy is
// capped by registers. On the 8B shape its big launches stream at 3.0-3.5
// TB/s of the 4.5 the H200 reads at: down_proj (4,096 rows of 28 KB, one
// wave) is the slowest at 3.0, since each warp waits out a full memory
// latency per 2 KB. Here one thread per CTA asks the copy engine for whole
// tiles (8 rows × 4 KB), kStages tiles ahead, no registers held, and the
// weight rows are read before the kernel's PDL wait, while the kernel before
// it runs.
//
// The layout: a persistent grid (one CTA per SM) walks groups of 8 weight
// rows (4 output rows for SwiGLU: 4 gate and 4 up rows); a group's rows
// come in tiles of 2,048 columns. A CTA has 8 consumer warps and one
// producer warp. Each consumer thread owns 8 columns of the tile: it reads
// their 8 x values once and multiplies them into all 8 rows (the
// warp-per-row kernel reads x once per row), so a tile costs it 2 global
// and 8 shared 16-byte loads. At the end of a group the 256 partial sums of
// each row are reduced through the warps and shared memory. With the
// block's RMSNorm (norm_w), the consumers first write x̂ into shared memory,
// with the bits rms_norm gives, and read x from there.
//
// Pipeline: tile slots in a ring; full[s] completes when the copy engine has
// written slot s (mbarrier transaction count), empty[s] when every consumer
// thread has read it. Phases alternate each lap of the ring (parity waits).
//
// Llama-3-8B bf16 decode, batch 1: 222 → 236 tokens/s, 248 with the norm
// taken in (it saves a kernel before Q/K/V and before gate/up).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/row_norm.cuh"
#include "core/env_switch.h"

namespace brioche::cuda::detail {

namespace {

constexpr int kConsumerWarps = 8;
constexpr int kConsumerThreads = kConsumerWarps * 32;
constexpr int kThreads = kConsumerThreads + 32;  // the last warp produces
constexpr int kColsPerThread = 8;                    // 16 bytes of a 16-bit type
constexpr int kTileCols = kConsumerWarps * 32 * kColsPerThread;
constexpr int kTileRowBytes = kTileCols * 2;
constexpr int kTileRows = 8;  // weight rows per tile
// Tile slots per CTA, one CTA per SM: 4 × 32 KB ≈ 17 MB over the H200's 132
// SMs, ~4 µs of HBM time. Llama-3-8B bf16 decode: 2 slots 208 tokens/s, 3:
// 217, 4: 236, 5 and 6: no better (two CTAs per SM of 3 slots each: the
// same as one of 4).
constexpr int kStages = 4;

// ---- mbarrier and bulk copy (PTX ISA: "mbarrier", "cp.async.bulk")

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void barrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

__device__ __forceinline__ void barrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// The producer's arrival, announcing `bytes` the copy engine will deliver.
__device__ __forceinline__ void barrier_arrive_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Until the phase of parity `parity` has completed (a fresh barrier counts
// its phase before the first, parity 1, as completed).
__device__ __forceinline__ void barrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

// `bytes` (a multiple of 16, both ends 16-byte aligned) from global to
// shared memory by the copy engine, completing on `bar`.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// 16 bytes of W as 8 floats.
template <typename W>
__device__ __forceinline__ void unpack8(uint4 raw, float (&v)[8]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<W, __nv_bfloat16>) {
      v[2 * i] = __uint_as_float(words[i] << 16);
      v[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
}

// A slot of the ring and the parity of its current lap.
struct RingPosition {
  int slot = 0;
  uint32_t parity = 0;
  __device__ void advance() {
    if (++slot == kStages) {
      slot = 0;
      parity ^= 1;
    }
  }
};

// Output rows per group: 8, or 4 gate rows and their 4 up rows.
template <bool kSwiglu>
inline constexpr int kGroupRows = kSwiglu ? kTileRows / 2 : kTileRows;

// x̂ of up to this many values when the kernel takes the norm
// (rms_norm_threads(k) = 256).
constexpr int kMaxNormedK = 4 * kRmsNormVec * kConsumerThreads;

// The dynamic shared memory; `normed` only where the kernel takes the norm
// (the launch's size ends before it otherwise).
struct StreamShared {
  uint8_t tiles[kStages][kTileRows][kTileRowBytes];
  uint64_t full[kStages];   // the copy engine has written the slot
  uint64_t empty[kStages];  // every consumer thread has read it
  float partials[2][kConsumerWarps][kTileRows];  // a group's warp sums (two groups alternate)
  float normed[kMaxNormedK];                     // x̂
};

constexpr size_t shared_bytes(bool norm) {
  return norm ? sizeof(StreamShared) : offsetof(StreamShared, normed);
}

// The producer (one thread): each tile of each of the CTA's groups, a tile
// slot once its last reader has released it.
template <typename W, bool kSwiglu>
__device__ void produce_tiles(const GemvArgs& a, StreamShared& s) {
  constexpr int kRows = kGroupRows<kSwiglu>;
  const int64_t groups = (a.m + kRows - 1) / kRows, tiles_per_row = (a.k + kTileCols - 1) / kTileCols;
  RingPosition at;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int rows = int(std::min<int64_t>(kRows, a.m - g * kRows));
    for (int64_t c = 0; c < tiles_per_row; ++c) {
      const int64_t col = c * kTileCols;
      const uint32_t bytes = uint32_t(std::min<int64_t>(kTileCols, a.k - col) * int64_t(sizeof(W)));
      const uint32_t full = shared_address(&s.full[at.slot]);
      barrier_wait(shared_address(&s.empty[at.slot]), at.parity ^ 1);
      barrier_arrive_expect(full, bytes * rows * (kSwiglu ? 2 : 1));
      const uint32_t tile = shared_address(s.tiles[at.slot]);
      for (int i = 0; i < rows; ++i) {
        const GemvTarget t = gemv_target(a, g * kRows + i);
        bulk_copy(tile + i * kTileRowBytes, t.w + col * sizeof(W), bytes, full);
        if constexpr (kSwiglu) bulk_copy(tile + (kRows + i) * kTileRowBytes, t.w_up + col * sizeof(W), bytes, full);
      }
      at.advance();
    }
  }
}

// Σ over the CTA's 256 threads of each row's partial, then the stores
// (threads 0..kRows-1, one output row each).
template <bool kSwiglu>
__device__ void reduce_store_group(const GemvArgs& a, StreamShared& s, int64_t g, int parity,
                                   float (&acc)[kTileRows]) {
  constexpr int kRows = kGroupRows<kSwiglu>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float(&partials)[kConsumerWarps][kTileRows] = s.partials[parity];
#pragma unroll
  for (int i = 0; i < kTileRows; ++i) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], off);
    if (lane == 0) partials[warp][i] = acc[i];
  }
  // Only the consumer warps (barrier 1; barrier 0 is __syncthreads). The
  // partials alternate between two buffers: a group's are read before any
  // thread reaches the next group's barrier, so the group after next may
  // overwrite them.
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumerThreads) : "memory");
  const int64_t row = g * kRows + threadIdx.x;
  if (threadIdx.x < kRows && row < a.m) {
    float sum = 0, sum_up = 0;
#pragma unroll
    for (int w = 0; w < kConsumerWarps; ++w) {
      sum += partials[w][threadIdx.x];
      if constexpr (kSwiglu) sum_up += partials[w][kRows + threadIdx.x];
    }
    gemv_store<kSwiglu>(a, gemv_target(a, row), 0, sum, sum_up);
  }
}

// x̂ = RMSNorm(x) into shared memory, by the consumer threads, with the bits
// rms_norm gives (row_norm.cuh; the weight g loaded before the PDL wait).
__device__ void normalize_x(const GemvArgs& a, const float4 (&g)[kRmsNormVec], StreamShared& s) {
  float4 v[kRmsNormVec];
  rms_norm_row<kConsumerThreads>(a.x, g, a.k, a.norm_eps, v);
  float4* out = reinterpret_cast<float4*>(s.normed);
#pragma unroll
  for (int j = 0; j < kRmsNormVec; ++j) {
    const int i = threadIdx.x + j * kConsumerThreads;
    if (i < a.k / 4) out[i] = v[j];
  }
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumerThreads) : "memory");
}

// A consumer thread: its 8 columns of every tile, times its 8 x values (of
// x̂ in shared memory with kNorm).
template <typename W, bool kSwiglu, bool kNorm>
__device__ void consume_tiles(const GemvArgs& a, StreamShared& s) {
  const float* x = kNorm ? s.normed : a.x;
  constexpr int kRows = kGroupRows<kSwiglu>;
  const int64_t groups = (a.m + kRows - 1) / kRows, tiles_per_row = (a.k + kTileCols - 1) / kTileCols;
  RingPosition at;
  int group_parity = 0;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x, group_parity ^= 1) {
    float acc[kTileRows] = {};
    for (int64_t c = 0; c < tiles_per_row; ++c) {
      const int64_t col = c * kTileCols + threadIdx.x * kColsPerThread;
      barrier_wait(shared_address(&s.full[at.slot]), at.parity);
      if (col < a.k) {  // (k is a multiple of 8: a thread's columns are all in or all out)
        const float4 x0 = load_x4<kNorm>(x + col), x1 = load_x4<kNorm>(x + col + 4);
#pragma unroll
        for (int i = 0; i < kTileRows; ++i) {
          float v[8];
          unpack8<W>(reinterpret_cast<const uint4*>(s.tiles[at.slot][i])[threadIdx.x], v);
          acc[i] += v[0] * x0.x + v[1] * x0.y + v[2] * x0.z + v[3] * x0.w + v[4] * x1.x + v[5] * x1.y +
                    v[6] * x1.z + v[7] * x1.w;
        }
      }
      // Each thread releases its own reads (an arrival orders only the
      // arriving thread's accesses before the copy engine's next write).
      barrier_arrive(shared_address(&s.empty[at.slot]));
      at.advance();
    }
    reduce_store_group<kSwiglu>(a, s, g, group_parity, acc);
  }
}

template <typename W, bool kSwiglu, bool kNorm>
__global__ void __launch_bounds__(kThreads, 1) gemv_stream_kernel(GemvArgs a) {
  extern __shared__ __align__(128) uint8_t shared[];
  StreamShared& s = *reinterpret_cast<StreamShared*>(shared);
  const bool producer = threadIdx.x >= kConsumerThreads;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      barrier_init(shared_address(&s.full[i]), 1);
      barrier_init(shared_address(&s.empty[i]), kConsumerThreads);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (producer) {
    // The weights, which no kernel writes, stream in before (and while) the
    // consumers wait for the kernel before this one (launch.cuh): the copy
    // engine fills the first kStages tiles during its tail. The producer
    // writes nothing in global memory and reads only weights, so it needs
    // no wait of its own; the consumers' wait keeps the CTA from completing
    // before the previous kernel.
    if (threadIdx.x == kConsumerThreads) produce_tiles<W, kSwiglu>(a, s);
    return;
  }
  float4 g[kNorm ? kRmsNormVec : 1];
  if constexpr (kNorm) load_norm_weight<kConsumerThreads>(a.norm_w, a.k, g);  // before the wait: weights
  pdl_prologue();
  if constexpr (kNorm) normalize_x(a, g, s);
  consume_tiles<W, kSwiglu, kNorm>(a, s);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

int multiprocessor_count() {
  static const int sms = [] {
    int device = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device));
    return v;
  }();
  return sms;
}

template <typename W, bool kSwiglu, bool kNorm>
void launch(const GemvArgs& a) {
  constexpr size_t smem = shared_bytes(kNorm);
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(gemv_stream_kernel<W, kSwiglu, kNorm>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)configured;
  const int64_t groups = (a.m + kGroupRows<kSwiglu> - 1) / kGroupRows<kSwiglu>;
  const unsigned grid = unsigned(std::min<int64_t>(groups, multiprocessor_count()));
  launch_dependent(gemv_stream_kernel<W, kSwiglu, kNorm>, grid, kThreads, smem, a);
}

template <typename W, bool kSwiglu>
void launch_norm_or_not(const GemvArgs& a) {
  if (a.norm_w != nullptr) launch<W, kSwiglu, true>(a);
  else launch<W, kSwiglu, false>(a);
}

}  // namespace

// Launches below this many weight bytes keep the warp-per-row kernel: their
// time is mostly ramp, which a one-wave persistent grid does not shorten.
// (Every Llama-3-8B launch is at least 32 MB, Q, K and V being one; smaller
// models' k is under kTileCols anyway: SmolLM2's 576.)
constexpr int64_t kStreamMinBytes = int64_t(8) << 20;

bool gemv_stream_takes(DType wtype, const GemvArgs& a) {
  static const bool on = env_switch_on("BRIOCHE_CUDA_GEMV_STREAM");
  if (!on || (wtype != DType::BF16 && wtype != DType::F16) || a.n != 1) return false;
  bool ok = a.k % 8 == 0 && a.k >= kTileCols && aligned16(a.x) && (a.w_up == nullptr || aligned16(a.w_up)) &&
            gemv_weight_bytes(a) >= kStreamMinBytes;
  if (a.norm_w != nullptr) ok = ok && rms_norm_threads(a.k) == kConsumerThreads && aligned16(a.norm_w);
  for (int p = 0; p < a.n_parts; ++p) ok = ok && aligned16(a.parts[p].w) && a.parts[p].w_row_bytes % 16 == 0;
  return ok;
}

void gemv_stream(DType wtype, const GemvArgs& a) {
  BRIOCHE_CHECK(gemv_stream_takes(wtype, a), "gemv_stream: takes one x row of bf16/f16 weights of at least ",
                kStreamMinBytes >> 20, " MB, k a multiple of 8 from ", kTileCols, " (to ", kMaxNormedK,
                " with the norm), 16-byte aligned rows; got ", dtype_name(wtype), ", n ", a.n, ", k ", a.k, ", ",
                gemv_weight_bytes(a), " weight bytes");
  const bool swiglu = a.w_up != nullptr;
  if (wtype == DType::BF16) swiglu ? launch_norm_or_not<__nv_bfloat16, true>(a) : launch_norm_or_not<__nv_bfloat16, false>(a);
  else swiglu ? launch_norm_or_not<__half, true>(a) : launch_norm_or_not<__half, false>(a);
}

}  // namespace brioche::cuda::detail
