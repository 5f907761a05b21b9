// The CUDA device as the rest of brioche sees it: one stream, a caching
// allocator, host<->device copies, and device-resident Tensors.
//
// Plain C++ (no CUDA headers), so ops/ and tests can include it; the
// implementation lives in runtime.cu and exists only when BRIOCHE_CUDA=ON.
// Every failing CUDA call throws brioche::Error with the CUDA error string and
// the call site.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>

#include "core/tensor.h"

namespace brioche::cuda {

// Number of CUDA devices the driver reports; 0 (not an error) without a
// driver or a GPU.
int device_count();
// Streaming multiprocessors of the current device (asked once).
int multiprocessor_count();
// The current device's free and total memory in bytes (cudaMemGetInfo).
struct MemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
MemoryInfo memory_info();

// The stream every brioche kernel runs on (a cudaStream_t).
void* stream();
// Waits until all queued device work is done; rethrows asynchronous errors.
void synchronize();

// Device memory from the caching allocator: freed blocks are kept by size
// class and reused, so per-step buffers cost no cudaMalloc. The pointer stays
// valid until the last copy of the returned owner is dropped; the block is
// reused only by work queued later on the same stream.
std::shared_ptr<void> allocate(size_t bytes);

// Page-locked host memory (cudaMallocHost): copies to and from the device run
// at the link's full speed and host->device copies stay asynchronous. Freed
// (cudaFreeHost) when the last owner goes; for long-lived buffers.
std::shared_ptr<void> allocate_pinned_host(size_t bytes);

struct AllocatorStats {
  size_t bytes_in_use = 0;  // handed out now
  size_t bytes_cached = 0;  // freed, kept for reuse
  size_t peak_bytes_in_use = 0;
  size_t cuda_mallocs = 0;  // calls that reached cudaMalloc
};
AllocatorStats allocator_stats();
// Returns cached blocks to the driver.
void release_cached_memory();

// Stream-ordered copies. Host->device returns once the host buffer may be
// reused; device->host blocks until the data has arrived.
void copy_to_device(void* device_dst, const void* host_src, size_t bytes);
void copy_to_host(void* host_dst, const void* device_src, size_t bytes);
void copy_device_to_device(void* dst, const void* src, size_t bytes);
void fill_bytes(void* device_dst, uint8_t value, size_t bytes);

// A copy on a second stream, beside the kernels: it starts once the work
// queued so far on the compute stream has run and overlaps what is queued
// after it (offloaded training activations going to or coming from the
// host). Host memory must be page-locked (allocate_pinned_host), or the
// driver stages it synchronously. Returns the copy's end, an opaque event.
std::shared_ptr<void> copy_on_side_stream(void* dst, const void* src, size_t bytes);
// The same with the caller's two events (created on first use, recorded
// again by each call), for a copy made every decode step that is waited for
// (host_waits_for(done)) before the next: no event created per call.
struct SideCopyEvents {
  std::shared_ptr<void> queued;  // the compute stream's work before the copy
  std::shared_ptr<void> done;    // the copy's end
};
void copy_on_side_stream(void* dst, const void* src, size_t bytes, SideCopyEvents& events);
// Work queued on the compute stream from now on runs after `copy_done` (the
// host does not wait).
void compute_waits_for(const std::shared_ptr<void>& copy_done);

// Records in `event` the end of the work queued so far on the compute stream
// (the event, an opaque owner, is created on first use), and makes the host
// wait until the device gets there (no-op for an empty owner).
void record_event(std::shared_ptr<void>& event);
void host_waits_for(const std::shared_ptr<void>& event);

// A device copy of small host metadata (positions, block tables), cached by
// content: the same span uploaded again (every layer of one forward) costs a
// host memcmp, not a copy. The pointer returned (a copy or a cached one) is
// valid for work queued before 16 more calls. While a graph is recorded (graph.h) the copy gets a buffer of its
// own that the graph keeps: a replay reads the content as of the capture.
const void* upload_cached(const void* host, size_t bytes);

// An uninitialised contiguous tensor on the device.
Tensor empty(DType dtype, std::initializer_list<int64_t> shape);
Tensor empty(DType dtype, const int64_t* shape, int rank);
// A contiguous device copy of a CPU tensor (any layout of whole rows).
Tensor to_device(const Tensor& host);
// A contiguous CPU copy of a device tensor.
Tensor to_host(const Tensor& device_tensor);

}  // namespace brioche::cuda
