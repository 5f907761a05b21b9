// The norm handoff between two ops of a decode step, as a value the model
// passes to both. The op that adds to the residual y (o_proj's
// matmul_accumulate or paged_attention's projection, swiglu_mlp's down) can
// also write RMSNorm(y) with the next block's norm weight, in the form the
// next op's GEMV reads (backend/cuda/norm_handoff.h has the math), so no norm
// kernel runs between them. On the GPU's one-row decode path that saves a
// launch and a pass over y per block; elsewhere nothing is ever handed on
// and the reading op computes its norm itself.
//
//   NormHandoff handoff;
//   handoff.request(y, ffn_norm);                 // what the next writer hands on
//   matmul_accumulate(attn, wo, y, scratch, {.hand_on = &handoff});  // writer
//   swiglu_mlp(y, {.weight = ffn_norm, ..., .handoff = &handoff}, ...);  // reader
//
// A wrong use is an error, not stale numbers: the reader is given the norm
// only when it reads the very tensor the writer added to, with the same norm
// weight, and no op has written that tensor since (Storage::version, which
// every op bumps on the tensors it writes); a writer given a request for
// another tensor fails too.
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace brioche::ops {

class NormHandoff {
 public:
  // The next writer given this handoff that adds to y hands on RMSNorm(y)
  // with norm_weight. An undefined norm_weight withdraws the request (no norm
  // of y follows). A new request replaces the one before; a norm already
  // handed on stays for its reader.
  void request(const Tensor& y, const Tensor& norm_weight);

  // Writer side. The norm weight requested for y (nullptr when none is, or
  // the request was withdrawn), taken: one writer answers a request. Fails
  // when the request names another tensor than y.
  const Tensor* take_request(const Tensor& y, const char* op);
  // The writer wrote y (y.note_written() already called) and with it the
  // backend's norm of y with norm_weight (opaque here; null when the launch
  // could not write it).
  void hand_on(const Tensor& y, const Tensor& norm_weight, std::shared_ptr<void> norm);

  // Reader side: the backend's norm of x with norm_weight, when one was
  // handed on, taken (null when none was). Fails when what was handed on is
  // the norm of another tensor or with another norm weight, or when x was
  // written after it was handed on.
  std::shared_ptr<void> take_handed(const Tensor& x, const Tensor& norm_weight, const char* op);

  bool has_request() const { return requested_.defined(); }
  bool has_handed() const { return handed_ != nullptr; }

 private:
  // The request: the tensor the next writer adds to, and its norm weight.
  Tensor requested_;
  Tensor requested_norm_;
  // What the last writer handed on, the tensor it is the norm of, that
  // tensor's version right after the write, and the norm weight.
  std::shared_ptr<void> handed_;
  Tensor handed_y_;
  uint64_t handed_version_ = 0;
  Tensor handed_norm_;
};

// One writer's side of a handoff (matmul_accumulate, paged_attention's
// projection, swiglu_mlp's down), for the op's launchers: the requested
// norm weight for y (f32 [k] data, or null), a slot where the launch puts
// what it wrote, and finish() to hand that on once the op is queued.
// Without a handoff (null) it asks for nothing.
class HandOnWrite {
 public:
  HandOnWrite(NormHandoff* handoff, const Tensor& y, const char* op);
  const float* norm_w() const { return norm_ != nullptr ? norm_->data_as<float>() : nullptr; }
  std::shared_ptr<void>* slot() { return &written_; }
  void finish();

 private:
  NormHandoff* handoff_;
  const Tensor& y_;
  const Tensor* norm_ = nullptr;
  std::shared_ptr<void> written_;
};

}  // namespace brioche::ops
