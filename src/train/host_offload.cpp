#include "train/host_offload.h"

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
  Tensor& host = host_[slot];
  if (!host.defined() || host.dtype() != t.dtype() || host.shape() != t.shape())
    host = ops::pinned_host_zeros(t.dtype(), {t.dim(0), t.dim(1)});  // pinning is slow: reused across steps
  ops::PendingCopy copy = ops::copy_async(t, host);
  current_.push_back({std::move(t), std::move(copy)});
  return host;
}

HostOffload::Fetch HostOffload::fetch(size_t slot, Device device) {
  BRIOCHE_CHECK(slot < host_.size() && host_[slot].defined(), "host offload: slot ", slot, " was never put");
  const Tensor& host = host_[slot];
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
  return slot < host_.size() && host_[slot].defined() ? host_[slot].nbytes() : 0;
}

}  // namespace brioche::train
