// Tensors on a device: allocation, transfer and copies, for layers above
// ops that must not include CUDA headers. Every function works in the CPU
// build; asking for Device::CUDA there is an error that says so.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>

#include "core/tensor.h"

namespace brioche::ops {

// True when this build has the CUDA backend and the driver sees a GPU.
bool cuda_available();

// A device's free and total memory in bytes (CUDA only; throws for the CPU).
struct DeviceMemory {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
DeviceMemory device_memory(Device device);

// A zero-filled contiguous tensor on `device`.
Tensor zeros(DType dtype, std::initializer_list<int64_t> shape, Device device);

// A contiguous tensor on `device` whose contents are unspecified, for a
// buffer that an op overwrites whole (every activation of a training step:
// zero-filling them first is one more pass over memory each). When the
// environment has BRIOCHE_POISON=1 (every test binary sets it, see
// tests/poison_env.cpp) it is filled with 0xFF bytes, NaN in every float
// type, on either device: a read before the write then shows up as NaN
// instead of passing on zeros or on a previous buffer's values.
Tensor uninitialized(DType dtype, std::initializer_list<int64_t> shape, Device device);

// A zero-filled contiguous CPU tensor in page-locked memory when this build
// has CUDA and a GPU is visible (full-speed copies to and from the device),
// ordinary host memory otherwise. For long-lived staging buffers (offloaded
// training activations): each allocation pins pages, which is slow.
Tensor pinned_host_zeros(DType dtype, std::initializer_list<int64_t> shape);

// A step's small inputs (ids, positions, block tables) copied to the device
// from page-locked host memory, two buffers used in turn: such a copy never
// makes the host wait for the kernels queued before it, while one from
// pageable memory may wait for the stream to drain, which would stall a
// decode step queued ahead of its tokens (engine/scheduler.cpp). Before a
// buffer is written again the host waits for the copy that last read it
// (two steps back, long done by then).
//
//   std::span<int32_t> in = staged.fill(n);   // write the n values
//   staged.upload(device_i32_n);
class StagedUpload {
 public:
  std::span<int32_t> fill(size_t count);
  // Queues dst = the values fill() returned (dst: dense i32 [count]).
  void upload(Tensor& dst);

 private:
  struct Buffer {
    Tensor host;                 // i32, page-locked when a GPU is present
    std::shared_ptr<void> read;  // event: its last copy has run
  };
  Buffer buffers_[2];
  int current_ = 0;
  size_t count_ = 0;
};

// `t` itself when it is already on `device`, else a contiguous copy there.
Tensor to_device(const Tensor& t, Device device);

// dst = src for tensors of equal dtype and shape whose rows are contiguous,
// on any pair of devices (row strides may differ).
void copy(const Tensor& src, Tensor& dst);

// A copy in flight beside the device's kernels (copy_async).
class PendingCopy {
 public:
  // Device work queued from now on runs after the copy (the host does not
  // wait). Required before reading the copy's destination or overwriting
  // its source on the device; a no-op once waited for, or for CPU copies.
  void wait();

 private:
  friend PendingCopy copy_async(const Tensor& src, Tensor& dst);
  std::shared_ptr<void> done_;
};

// dst = src between a CUDA tensor and a page-locked host tensor
// (pinned_host_zeros) of the same dtype and shape, both dense, on a second
// stream: it starts after the work queued so far and overlaps the work
// queued after it. On the CPU, an ordinary copy (done on return).
PendingCopy copy_async(const Tensor& src, Tensor& dst);

// Waits for queued work on `device` (no-op on the CPU).
void synchronize(Device device);

// ids[r] = argmax of row r of f32 logits [n, vocab] (first maximum), on the
// logits' device; only the ids cross to the host.
void argmax_rows(const Tensor& logits, std::span<int32_t> ids);

}  // namespace brioche::ops
