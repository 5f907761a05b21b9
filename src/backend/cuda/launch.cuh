// Programmatic dependent launch (PDL) for the kernels of a decode step.
//
// A decode step is a chain of a few hundred kernels, each dependent on the
// one before, many of them tiny (norms, RoPE, attention over one row). On a
// plain stream a kernel's first CTA starts only after the previous grid has
// fully drained, so every boundary costs a ramp-down plus a ramp-up of a few
// microseconds with the memory system idle. With PDL (sm_90) the next grid
// is launched as soon as every CTA of the running one has executed
// `griddepcontrol.launch_dependents`; its CTAs become resident and wait in
// `griddepcontrol.wait`, which returns once the previous grid has completed
// and its writes are visible. Work that reads nothing the previous kernel
// writes (the GEMVs' weights) may run before the wait: the GEMVs prefetch
// their first weight rows into L2 there, so weight streaming overlaps the
// latency-bound kernel before them.
//
// The rule that keeps this correct: every kernel launched with
// launch_dependent() calls pdl_prologue() before any early return, any read
// of data that kernels write and any write; only reads of data no kernel
// writes (weights) and prefetches may come before it.
// Since each kernel waits for its predecessor's completion before it can
// complete itself, completion is transitive along the chain. A kernel
// launched the ordinary way (cuBLASLt, `<<<>>>`) waits for its predecessor as
// always, and a predecessor that never triggers does so when it completes.
// Inside a stream capture the launches become programmatic edges of the
// graph. BRIOCHE_CUDA_PDL=0 launches the same kernels without the attribute
// (the waits then return at once), for A/B runs.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_trace.h"
#include "core/env_switch.h"

namespace brioche::cuda::detail {

inline bool pdl_enabled() {
  static const bool on = env_switch_on("BRIOCHE_CUDA_PDL");
  return on;
}

#ifdef __CUDACC__
#if BRIOCHE_CUDA_TRACE
// The kernel trace (kernel_trace.h) of this translation unit's kernels: null
// unless BRIOCHE_CUDA_TRACE names a file, then set at the first dependent
// launch (install_kernel_trace), for which the unit lists it here.
static __constant__ KernelTraceBuffer* g_kernel_trace;
[[maybe_unused]] static const bool g_kernel_trace_listed =
    (list_kernel_trace_symbol(static_cast<const void*>(&g_kernel_trace)), true);

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The trace's view of a CTA, taken before the wait: the buffer and, when
// tracing, the time.
struct TraceStart {
  KernelTraceBuffer* buffer;
  uint64_t resident_ns;
};
__device__ __forceinline__ TraceStart trace_start() {
  KernelTraceBuffer* t = g_kernel_trace;
  return {t, t != nullptr ? global_ns() : 0};
}

// CTA 0's record, after the wait: a plain store into the slot of its time
// (kernel_trace.h), so CTA 0 does not wait on an atomic's round trip.
__device__ __forceinline__ void trace_kernel(const TraceStart& start) {
  if (start.buffer == nullptr || threadIdx.x + threadIdx.y + threadIdx.z + blockIdx.x + blockIdx.y + blockIdx.z != 0)
    return;
  const uint64_t released = global_ns();
  start.buffer->records[(released >> kKernelTraceSlotShift) & (kKernelTraceSlots - 1)] = {
      start.resident_ns, released, gridDim.x * gridDim.y * gridDim.z, blockDim.x * blockDim.y * blockDim.z};
}
#else
// (Not a trace build: nothing, not even the check for a buffer, which cost
// a decode step 4–6%: kernel_trace.h.)
struct TraceStart {};
__device__ __forceinline__ TraceStart trace_start() { return {}; }
__device__ __forceinline__ void trace_kernel(TraceStart) {}
#endif

// Waits for the previous kernel of the stream, then lets the next one launch.
// Triggering after the wait (not before) keeps at most one grid waiting
// behind the running one.
__device__ __forceinline__ void pdl_prologue() {
  const TraceStart trace = trace_start();
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  trace_kernel(trace);
}

// pdl_prologue with its steps the other way round, for a short kernel whose
// successor is a streamed GEMV (gemv_stream_rows.cu): that kernel launches
// at once, and its CTAs take each SM as the GEMV before this kernel leaves
// it, streaming their first weight tiles in during that kernel's tail and
// this one. Correctness is as above: this kernel still waits before its
// first read or write, and completes only after its predecessor; the GEMV
// triggers after its own wait, so at most two grids wait behind the running
// one. Llama-3-8B decode, the x quantization kernels before the streamed
// GEMVs: Q8_0 370–373 → 387–393 tokens/s, Q4_0 within noise (502–506 →
// 500). (Ahead of the warp-per-row GEMVs it cost Q4_K 3%, and in the
// attention combine of every launch SmolLM2 4%, so those keep pdl_prologue;
// the attention kernels use it only before a streamed int8 O projection:
// attention_paged.cuh, output_prologue.)
__device__ __forceinline__ void pdl_prologue_release_first() {
  const TraceStart trace = trace_start();
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  trace_kernel(trace);
}

// Asks L2 to fetch `bytes` (a multiple of 16, 16-byte aligned) at `p`: one
// bulk prefetch, no registers held, no completion to wait for.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}
#endif

// kernel<<<grid, block, smem, current_stream()>>>(args...), as a dependent
// launch (see above), in thread block clusters of `cluster` CTAs when that
// is not 1×1×1 (more than 8, up to 16 on the H200, once the kernel has
// cudaFuncAttributeNonPortableClusterSizeAllowed). The kernel must start
// with pdl_prologue().
template <typename... Params, typename... Args>
void launch_dependent_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 cluster, dim3 block, size_t smem,
                                  Args&&... args) {
#if defined(__CUDACC__) && BRIOCHE_CUDA_TRACE
  install_kernel_trace();  // (once; a decode step's first launches are eager, before any capture)
#endif
  cudaLaunchAttribute attrs[2]{};
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
  const unsigned cluster_ctas = cluster.x * cluster.y * cluster.z;
  if (cluster_ctas > 1) {
    attrs[1].id = cudaLaunchAttributeClusterDimension;
    attrs[1].val.clusterDim.x = cluster.x;
    attrs[1].val.clusterDim.y = cluster.y;
    attrs[1].val.clusterDim.z = cluster.z;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = current_stream();
  config.attrs = attrs;
  config.numAttrs = cluster_ctas > 1 ? 2 : 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  launch_dependent_in_clusters(kernel, grid, dim3(1, 1, 1), block, smem, std::forward<Args>(args)...);
}

}  // namespace brioche::cuda::detail
