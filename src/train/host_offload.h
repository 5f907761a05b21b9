// Activations parked in page-locked host memory between a forward and its
// backward (offload_boundaries, offload_attention), so the device holds one
// segment's activations at a time. The copies run on a second stream
// (ops::copy_async) and overlap the layers' kernels.
//
// A tensor handed to put() stays alive and unchanged here until its copy is
// done; the compute stream is made to wait for that copy one layer later
// (next_layer()), by when it has long finished: a copy of a residual takes
// ~3 ms over PCIe, a layer's forward ~15 ms at Llama-3-8B shapes. So the
// forward never stalls on the link, for up to two layers' tensors in flight.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "ops/device.h"

namespace brioche::train {

class HostOffload {
 public:
  // Marks the start of a layer: the copies begun two layers ago are done
  // before the work queued from now on, and their device tensors are freed.
  void next_layer();
  // Starts copying device matrix `t` [rows, cols] into host slot `slot`;
  // returns that host matrix: the leading rows of the slot's pinned buffer.
  // Pinning takes seconds per GiB and synchronises the device, so a buffer
  // is kept across steps and only grows, when a batch is longer than every
  // one before it (with shuffled data of varied lengths, about ln(steps)
  // times in a run), rounded up to kRowQuantum rows.
  Tensor put(size_t slot, Tensor t);
  static constexpr int64_t kRowQuantum = 256;
  // Buffers pinned from now on hold at least `rows` rows: a trainer that
  // knows its longest batch pins once, at the first step, instead of again
  // at every longer batch (each time seconds at 8B shapes).
  void reserve_rows(int64_t rows) { reserved_rows_ = rows; }
  // A device copy of slot `slot`, on its way: wait() on `copy` before
  // device work reads `t`.
  struct Fetch {
    Tensor t;
    ops::PendingCopy copy;
  };
  Fetch fetch(size_t slot, Device device);
  // The compute stream waits for every copy in flight; their tensors are freed.
  void settle();
  // Bytes of the matrix last put in slot `slot` (0 when never put).
  size_t bytes(size_t slot) const;

 private:
  struct InFlight {
    Tensor device;
    ops::PendingCopy copy;
  };
  struct Slot {
    Tensor buffer;  // pinned [capacity rows, cols]
    Tensor held;    // its leading rows: the matrix last put
  };
  std::vector<Slot> host_;  // by slot
  int64_t reserved_rows_ = 0;
  std::vector<InFlight> previous_;  // copies begun during the previous layer
  std::vector<InFlight> current_;   // and during this one
};

}  // namespace brioche::train
