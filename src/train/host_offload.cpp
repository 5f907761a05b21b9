#include "train/host_offload.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace brioche::train {

void HostOffload::next_layer() {
  for (InFlight& f : previous_) f.copy.wait();
  previous_ = std::move(current_);
  current_.clear();
}

Tensor HostOffload::put(size_t slot, Tensor t) {
  BRIOCHE_CHECK(t.rank() == 2 && t.device() == Device::CUDA, "host offload: expected a device matrix, got ",
                t.describe());
  if (host_.size() <= slot) host_.resize(slot + 1);
  Slot& s = host_[slot];
  const int64_t rows = t.dim(0), cols = t.dim(1);
  if (!s.buffer.defined() || s.buffer.dtype() != t.dtype() || s.buffer.dim(1) != cols || s.buffer.dim(0) < rows) {
    const int64_t capacity = (std::max(rows, reserved_rows_) + kRowQuantum - 1) / kRowQuantum * kRowQuantum;
    s.held = Tensor();
    s.buffer = Tensor();  // the old pinned buffer is given back before the larger one is pinned
    s.buffer = ops::pinned_host_zeros(t.dtype(), {capacity, cols});
  }
  s.held = s.buffer.slice(0, 0, rows);
  ops::PendingCopy copy = ops::copy_async(t, s.held);
  current_.push_back({std::move(t), std::move(copy)});
  return s.held;
}

HostOffload::Fetch HostOffload::fetch(size_t slot, Device device) {
  BRIOCHE_CHECK(slot < host_.size() && host_[slot].held.defined(), "host offload: slot ", slot, " was never put");
  const Tensor& host = host_[slot].held;
  Fetch f{ops::uninitialized(host.dtype(), {host.dim(0), host.dim(1)}, device), {}};
  f.copy = ops::copy_async(host, f.t);
  return f;
}

void HostOffload::settle() {
  for (std::vector<InFlight>* v : {&previous_, &current_}) {
    for (InFlight& f : *v) f.copy.wait();
    v->clear();
  }
}

size_t HostOffload::bytes(size_t slot) const {
  return slot < host_.size() && host_[slot].held.defined() ? host_[slot].held.nbytes() : 0;
}

}  // namespace brioche::train
