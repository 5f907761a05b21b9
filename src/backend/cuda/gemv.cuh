// Decode-time matrix-vector kernels: y[r, :] = x[r, :] · wᵀ for up to 8 rows.
//
// One warp per weight row (or two, reading each x chunk once for both:
// SwiGLU's gate and up, and pairs of rows where x loads dominate); each row is
// read exactly once, coalesced across the warp, and dequantized in registers;
// x rows (a few KB) stay in L1/L2. The
// number of x rows is a template bound (1, 4 or 8) with a runtime count, so
// one instantiation serves n in (bound/2, bound].
//
// Fusions that save a launch and a pass over y in a decode step:
//   * parts: up to three weights of one dtype and k (Q, K and V) in one
//     launch; output row j of the launch is row j − (rows of earlier parts)
//     of its part.
//   * accumulate: y += x·wᵀ (the residual add after o_proj and down_proj).
//   * w_up: y = silu(x·wᵀ) ⊙ (x·w_upᵀ) (SwiGLU; one part, w_up shaped like w),
//     each warp reading row j of both weights.
//   * norm_w: x goes through RMSNorm first (x̂ = x / rms(x) ⊙ norm_w, the
//     block's norm before Q/K/V and gate/up): the int8 path normalizes in
//     its x quantization, the dense kernels into shared memory at the start
//     of each CTA (gemv_dense_takes_norm says when), with the bits of
//     `rms_norm` (row_norm.cuh).
//   * lora: each output gets its row's adapter term (the LoRA table's
//     expand, backend/cpu/lora_rows.h) through the group's reduction in the
//     streamed kernel (gemv_stream.cuh, LoraLanes), so a served adapter's
//     projection costs no expand launch of its own; where
//     gemv_stream_takes_lora is false the expand kernel runs after.
// (The streamed int8 GEMV has fusions of its own, outside these arguments:
// gemv_int8.h, StreamFusions.)
#pragma once

#include <cstdint>
#include <type_traits>

#include "backend/cpu/lora_rows.h"
#include "backend/cpu/matmul.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/norm_hand_on.h"
#include "core/dtype.h"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace brioche::cuda::detail {

struct GemvPart {
  const void* w;  // [m, k] rows, row stride w_row_bytes
  size_t w_row_bytes;
  float* y;  // [n, m], row stride ldy floats
  int64_t ldy;
  int64_t m;
};

// Activation rows up to which a matmul is a GEMV (above: cuBLASLt).
inline constexpr int kMaxGemvRows = 8;

struct GemvArgs {
  const float* x;  // [n, k], row stride ldx floats (16-byte aligned rows)
  int64_t ldx;
  int n;  // 1..kMaxGemvRows
  int64_t k;
  GemvPart parts[3];
  int n_parts = 1;
  int64_t m = 0;  // rows over all parts
  bool accumulate = false;
  const void* w_up = nullptr;
  // Launch rows whose weights a warp asks L2 for before its PDL wait
  // (launch.cuh); matmul.cu sets it for small launches.
  int64_t prefetch_rows = 0;
  const float* norm_w = nullptr;  // [k], 16-byte aligned; x̂ instead of x when set
  float norm_eps = 0.0f;
  // With accumulate: also write RMSNorm(y) for the next op, where the launch
  // can (norm_handoff.h). Host-side only.
  NormHandOn hand_on;
  // The adapter table's terms added to the outputs, when lora.u is set: part
  // p's output c of x row r gets Σ_k u[r, p·rank_cap + k]·bt_f[k, c] of the
  // factors f of its slot (with w_up: part 0 is gate and part 1 up). lora.y
  // is not read: the GEMV's own outputs are the parts' y.
  backend::cpu::LoraTableArgs lora{};
};

inline constexpr int kGemvWarps = 4;  // rows of w per block

// Bytes of weights one launch reads (every part, and w_up).
inline int64_t gemv_weight_bytes(const GemvArgs& a) {
  int64_t bytes = 0;
  for (int p = 0; p < a.n_parts; ++p) bytes += int64_t(a.parts[p].w_row_bytes) * a.parts[p].m;
  return a.w_up != nullptr ? 2 * bytes : bytes;
}

#ifdef __CUDACC__
// Where launch row `row` reads its weights and writes its outputs.
struct GemvTarget {
  const uint8_t* w;
  const uint8_t* w_up;  // nullptr unless SwiGLU
  float* y;             // output column; row r at y[r · ldy]
  int64_t ldy;
  size_t row_bytes;
};

// The part that launch row `row` falls in, and the row within it. Index is
// int64_t, or int where a kernel's rows fit in 32 bits (the streamed int8
// GEMV's consumers: a shorter walk on their per-tile path).
template <class Index>
struct PartRow {
  const GemvPart* part;
  Index row;
};
template <class Index>
__device__ __forceinline__ PartRow<Index> part_of_row(const GemvArgs& a, Index row) {
  const GemvPart* p = &a.parts[0];
  if (row >= Index(a.parts[0].m)) {
    row -= Index(a.parts[0].m);
    p = &a.parts[1];
    if (row >= Index(a.parts[1].m)) {
      row -= Index(a.parts[1].m);
      p = &a.parts[2];
    }
  }
  return {p, row};
}

__device__ __forceinline__ GemvTarget gemv_target(const GemvArgs& a, int64_t launch_row) {
  const auto [p, row] = part_of_row(a, launch_row);
  const size_t off = size_t(row) * p->w_row_bytes;
  return {static_cast<const uint8_t*>(p->w) + off,
          a.w_up != nullptr ? static_cast<const uint8_t*>(a.w_up) + off : nullptr, p->y + row, p->ldy, p->w_row_bytes};
}

// An L2 policy under which the lines an access brings in are the first L2
// evicts: for weights, which a decode step reads once (gemv_stream.cuh,
// weights_evict_first, has the measurements). Not volatile, so the compiler
// makes one per kernel, not one per load.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// The 16-byte-aligned middle of [p, p + bytes) into L2.
__device__ __forceinline__ void prefetch_span_l2(const uint8_t* p, size_t bytes) {
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t(15);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~uintptr_t(15);
  if (end > begin) prefetch_l2(reinterpret_cast<const void*>(begin), uint32_t(end - begin));
}

// What a GEMV warp does first (lane 0 prefetches the weights of its first
// `rows` rows, which no kernel writes, then every thread waits for the
// previous kernel).
__device__ __forceinline__ void gemv_prologue(const GemvArgs& a, int64_t first_row, int rows, int lane) {
  for (int64_t row = first_row; lane == 0 && row < first_row + rows && row < a.prefetch_rows; ++row) {
    const GemvTarget t = gemv_target(a, row);
    prefetch_span_l2(t.w, t.row_bytes);
    if (t.w_up != nullptr) prefetch_span_l2(t.w_up, t.row_bytes);
  }
  pdl_prologue();
}

// 16 bytes of W (bf16 or f16) as 8 floats.
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

// 16 bytes of x: through the read-only cache from global memory, or from
// the CTA's normalized copy in shared memory.
template <bool kShared>
__device__ __forceinline__ float4 load_x4(const float* p) {
  if constexpr (kShared)
    return *reinterpret_cast<const float4*>(p);
  else
    return __ldg(reinterpret_cast<const float4*>(p));
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

// y += v for an output that only this thread writes in its launch (O and
// down add to the residual): a reduction sent to L2 (red.global.add.f32), so
// the thread neither waits for y's old value nor holds it in a register. One
// add, rounded to nearest like `y + v` in registers, so the bits are the same
// (but for a subnormal sum, which it flushes to zero). Before, the streamed
// int8 GEMV asked for y's old value at the top of each tile and added it at
// the store: under the weight stream that L2 round trip outlasted the tile's
// wait and arithmetic. Decode run ahead, A/B in one call (docs/perf-log/cuda-decode.md#red-add,
// 2026-12-02): Llama-3-8B Q8_0 432.4–433.1 → 442.6–446.1 tokens/s, Q4_0
// 610.6–613.4 → 628.7–629.0, Q4_K 596.1–598.9 → 617.4–618.4; in the warp
// kernels, SmolLM2 Q4_1 1,812–1,814 → 1,858–1,859, bf16 1,940–1,942 →
// 1,951–1,968; the 8B bf16 streamed GEMV at par (266.0 → 266.4–266.5).
__device__ __forceinline__ void add_to_output(float* y, float v) { atomicAdd(y, v); }

// Lane 0's store of output r: plain, accumulated, or the SwiGLU product.
template <bool kSwiglu>
__device__ __forceinline__ void gemv_store(const GemvArgs& a, const GemvTarget& t, int r, float s, float s_up) {
  float v = s;
  if constexpr (kSwiglu) v = silu(s) * s_up;
  float* out = t.y + int64_t(r) * t.ldy;
  if (a.accumulate)
    add_to_output(out, v);
  else
    *out = v;
}

// Sums each x row's per-lane partials over the warp and stores them (lane 0).
template <bool kSwiglu, int kMaxRows>
__device__ __forceinline__ void gemv_reduce_store(const GemvArgs& a, const GemvTarget& t, int lane,
                                                  const float (&acc)[kMaxRows], const float (&acc_up)[kMaxRows]) {
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    float s = acc[r], s_up = acc_up[r];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      s += __shfl_xor_sync(0xffffffffu, s, off);
      if constexpr (kSwiglu) s_up += __shfl_xor_sync(0xffffffffu, s_up, off);
    }
    if (lane == 0 && r < a.n) gemv_store<kSwiglu>(a, t, r, s, s_up);
  }
}
#endif

// Launchers, one per file so nvcc runs in parallel.
void gemv_dense(DType wtype, const GemvArgs& args);  // f32, f16, bf16
// Whether gemv_dense takes args.norm_w itself: x̂ of every row fits in 46 KB
// of shared memory, rows as rms_norm's 256-thread CTA reads them, and the
// launch is small enough that each CTA normalizing x again costs less than
// a norm kernel (it re-reads x and norm_w per 8 weight rows).
bool gemv_dense_takes_norm(DType wtype, const GemvArgs& args);
// Big launches (1..8 x rows) of bf16/f16 weights, streamed through shared memory
// by the copy engine (gemv_stream.cu); gemv_dense hands them over.
bool gemv_stream_takes(DType wtype, const GemvArgs& args);
void gemv_stream(DType wtype, const GemvArgs& args);
void gemv_quant(DType wtype, const GemvArgs& args);  // every block-quantized dtype
// Whether gemv_quant takes args.norm_w itself (the int8 path does).
bool gemv_quant_takes_norm(DType wtype, const GemvArgs& args);
// The launch arguments of matmul_accumulate(a) for a ≤ 8-row `a` (matmul.cu).
GemvArgs accumulate_gemv_args(const cpu::MatmulArgs& a, NormHandOn hand_on = {});
// Whether gemv_stream takes `args` with args.lora's terms: launches it
// streams of up to 4 x rows, ranks up to 32, parts of whole groups.
bool gemv_stream_takes_lora(DType wtype, const GemvArgs& args);
// Whether gemv_quant runs on the int8 path (gemv_int8.h), reading x as
// int8 blocks that one kernel quantizes first.
bool gemv_quant_reads_int8(DType wtype, const GemvArgs& args);

}  // namespace brioche::cuda::detail
