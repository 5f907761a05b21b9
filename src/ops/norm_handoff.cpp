#include "ops/norm_handoff.h"

#include <utility>

#include "core/error.h"

namespace brioche::ops {

namespace {

// The same view of the same memory: storage, offset, dtype, shape, strides.
bool same_view(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return false;
  if (a.storage() != b.storage() || a.data() != b.data() || a.dtype() != b.dtype() || a.rank() != b.rank())
    return false;
  for (int i = 0; i < a.rank(); ++i)
    if (a.dim(i) != b.dim(i) || a.stride(i) != b.stride(i)) return false;
  return true;
}

}  // namespace

void NormHandoff::request(const Tensor& y, const Tensor& norm_weight) {
  if (!norm_weight.defined()) {
    requested_ = Tensor();
    requested_norm_ = Tensor();
    return;
  }
  BRIOCHE_CHECK(y.defined(), "NormHandoff::request: expected the tensor the next op adds to, got an undefined one");
  BRIOCHE_CHECK(norm_weight.dtype() == DType::F32 && norm_weight.is_contiguous(),
                "NormHandoff::request: expected a contiguous f32 norm weight, got ", norm_weight.describe());
  requested_ = y;
  requested_norm_ = norm_weight;
}

const Tensor* NormHandoff::take_request(const Tensor& y, const char* op) {
  if (!requested_.defined()) return nullptr;
  BRIOCHE_CHECK(same_view(requested_, y), op, ": the norm handoff requests the norm of ", requested_.describe(), " at ",
                requested_.data(), ", but this op adds to ", y.describe(), " at ", y.data(),
                " (pass the handoff to the op that adds to the requested tensor)");
  requested_ = Tensor();
  return &requested_norm_;  // (valid until the next request)
}

void NormHandoff::hand_on(const Tensor& y, const Tensor& norm_weight, std::shared_ptr<void> norm) {
  handed_ = std::move(norm);
  if (handed_ == nullptr) {
    handed_y_ = Tensor();
    handed_norm_ = Tensor();
    return;
  }
  handed_y_ = y;
  handed_version_ = y.version();
  handed_norm_ = norm_weight;
}

std::shared_ptr<void> NormHandoff::take_handed(const Tensor& x, const Tensor& norm_weight, const char* op) {
  if (handed_ == nullptr) return nullptr;
  std::shared_ptr<void> norm = std::exchange(handed_, nullptr);
  const Tensor y = std::exchange(handed_y_, Tensor());
  const Tensor w = std::exchange(handed_norm_, Tensor());
  BRIOCHE_CHECK(same_view(y, x), op, ": the norm handed on is of ", y.describe(), " at ", y.data(),
                ", but this op normalizes ", x.describe(), " at ", x.data());
  BRIOCHE_CHECK(same_view(w, norm_weight), op, ": the norm handed on uses the norm weight at ", w.data(),
                ", but this op normalizes with the one at ", norm_weight.data());
  BRIOCHE_CHECK(x.version() == handed_version_, op, ": ", x.describe(), " was written ", x.version() - handed_version_,
                " time(s) after its norm was handed on; the norm would be stale (no op may write the tensor "
                "between the op that hands its norm on and the op that reads it)");
  return norm;
}

HandOnWrite::HandOnWrite(NormHandoff* handoff, const Tensor& y, const char* op)
    : handoff_(handoff), y_(y), norm_(handoff != nullptr ? handoff->take_request(y, op) : nullptr) {}

void HandOnWrite::finish() {
  if (handoff_ != nullptr) handoff_->hand_on(y_, norm_ != nullptr ? *norm_ : Tensor(), std::move(written_));
}

}  // namespace brioche::ops
