// Shared-memory barriers (mbarrier), and the stores and barriers through
// which the CTAs of a thread block cluster hand each other data (PTX ISA:
// "mbarrier", "mapa", "st.async", "barrier.cluster").
//
// An mbarrier completes a phase when its pending arrivals and its
// transaction count both reach zero: an arrival with expect_tx adds the
// bytes a producer will deliver, and each bulk copy or st.async into the
// barrier's CTA subtracts what it wrote. A waiter names the phase by its
// parity.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace brioche::cuda::detail {

__device__ __forceinline__ uint32_t shared_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void barrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

// After a CTA's barrier inits, before another CTA of its cluster (or the copy
// engine) may use them.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void barrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// An arrival announcing `bytes` that copies or other CTAs will deliver.
__device__ __forceinline__ void barrier_arrive_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Until the phase of parity `parity` has completed (a fresh barrier counts
// its phase before the first, parity 1, as completed).
__device__ __forceinline__ void barrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  }
}

// barrier_wait for data other CTAs of the cluster stored (st.async): their
// stores are visible once it returns.
__device__ __forceinline__ void barrier_wait_cluster(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

// The address of this CTA's shared location `local` in the CTA of rank
// `rank` of the cluster (a shared::cluster address).
__device__ __forceinline__ uint32_t cluster_address(uint32_t local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}

// v to the shared::cluster address dst, completing its bytes on the barrier
// at shared::cluster address bar (in the same CTA as dst). (Wide stores:
// 4-byte pushes made the decode attention slower, docs/perf-log/cuda-decode.md#cluster-push-merge.)
__device__ __forceinline__ void store_to_cluster(uint32_t dst, float2 v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(dst),
               "f"(v.x), "f"(v.y), "r"(bar)
               : "memory");
}

__device__ __forceinline__ void store_to_cluster(uint32_t dst, float4 v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(dst),
               "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar)
               : "memory");
}

// The cluster barrier in two halves: every thread of every CTA arrives once,
// and a thread's wait returns when all threads of the cluster that have not
// exited have arrived, their memory accesses before it (and barrier inits
// fenced by fence_barrier_init) ordered before what follows the wait. (The
// release waits for the thread's loads and stores in flight.)
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }

__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }

}  // namespace brioche::cuda::detail
