// A timeline of the decode chain's kernels, for finding where a step's time
// goes (docs/cuda.md, "A timeline of the kernel chain").
//
// In a trace build (cmake --preset cuda-trace: BRIOCHE_CUDA_TRACE=ON), run
// with BRIOCHE_CUDA_TRACE=path in the environment, CTA 0 of every kernel
// that starts with the PDL prologue (launch.cuh: every kernel of a decode
// step) records, from the device's global timer, when it became resident
// and when its wait for the kernel before returned. In a chain of dependent
// kernels the second is when the kernel before completed, so the difference
// between consecutive records is what each kernel adds to the step,
// overlaps included.
//
// A record goes to the slot of its release time (128 ns a slot, 2^24 slots
// of 24 bytes: 384 MiB of device memory, the last ~2.1 s), a plain store:
// an atomic counter's round trip delayed CTA 0 of every kernel by ~0.5 µs,
// which the trace then measured. Two kernels released within one slot keep
// one record. At exit the records go
// to `path` as CSV (resident_ns, released_ns, grid CTAs, threads per CTA),
// in the order their waits returned; bench/cuda_trace_chain.py sums them per
// kernel of a layer. The check for a buffer (a constant load before the wait,
// a branch after it) costs a decode step 4–6% (8B Q4_0 517 → 498 tokens/s,
// Q8_0 391–396 → 368–369, SmolLM2 1,607–1,628 → 1,520–1,527), so it exists
// only in trace builds; the trace itself costs little more (Q4_0 499.5).
#pragma once

#include <cstdint>

namespace brioche::cuda::detail {

struct KernelTraceRecord {
  uint64_t resident_ns, released_ns;
  uint32_t grid, block;  // CTAs, threads per CTA
};

inline constexpr int kKernelTraceSlotShift = 7;  // 128 ns a slot
inline constexpr uint32_t kKernelTraceSlots = 1u << 24;

struct KernelTraceBuffer {
  KernelTraceRecord records[kKernelTraceSlots];  // zero where no kernel was released
};

// The device buffer when BRIOCHE_CUDA_TRACE names a file (made on the first
// call, written out at exit), else null.
KernelTraceBuffer* kernel_trace_buffer();

// Each translation unit with decode kernels has its own copy of the device
// pointer they read (launch.cuh: a __constant__ of internal linkage). It
// lists its copy at static initialization (no CUDA call there), and the
// first dependent launch of any of them sets every listed copy to the
// buffer. (A once-flag per launch template instead would be shared by the
// units that instantiate it with the same parameter types, leaving all but
// one unit's kernels untraced.)
void list_kernel_trace_symbol(const void* symbol);
void install_kernel_trace();

}  // namespace brioche::cuda::detail
