#include "ops/adamw.h"

#include <cmath>
#include <vector>

#include "backend/cpu/adamw.h"
#include "ops/check_f32.h"
#if BRIOCHE_CUDA
#include "backend/cuda/train_kernels.h"
#endif

namespace brioche::ops {

namespace {

float* contiguous_f32(const Tensor& t, const char* what) {
  BRIOCHE_CHECK(t.defined() && t.dtype() == DType::F32 && t.is_contiguous(), "adamw_step: ", what,
                " must be a contiguous f32 tensor, got ", t.defined() ? t.describe() : "undefined");
  return const_cast<float*>(t.data_as<float>());
}

}  // namespace

void adamw_step(std::span<const AdamWSlot> slots, const AdamWStep& s) {
  if (slots.empty()) return;
  BRIOCHE_CHECK(s.step >= 1, "adamw_step: step must be 1-based, got ", s.step);
  std::vector<backend::cpu::AdamWTensor> tensors;
  tensors.reserve(slots.size());
  const Device device = slots[0].param->device();
  for (const AdamWSlot& slot : slots) {
    detail::common_device("adamw_step", {slot.param, slot.grad, slot.m, slot.v, slots[0].param});
    const int64_t n = slot.param->numel();
    for (const Tensor* t : {slot.grad, static_cast<const Tensor*>(slot.m), static_cast<const Tensor*>(slot.v)}) {
      BRIOCHE_CHECK(t->numel() == n, "adamw_step: parameter ", slot.param->describe(), " has ", n,
                    " elements but its gradient or moment ", t->describe(), " has ", t->numel());
    }
    tensors.push_back({.param = contiguous_f32(*slot.param, "param"),
                       .grad = contiguous_f32(*slot.grad, "grad"),
                       .m = contiguous_f32(*slot.m, "m"),
                       .v = contiguous_f32(*slot.v, "v"),
                       .n = n,
                       .lr = s.lr * slot.lr_scale});
  }
  // Bias corrections as train::AdamW computes them (f32 pow).
  const backend::cpu::AdamWConstants k{.beta1 = s.beta1,
                                       .beta2 = s.beta2,
                                       .eps = s.eps,
                                       .weight_decay = s.weight_decay,
                                       .c1 = 1.0f - std::pow(s.beta1, float(s.step)),
                                       .c2 = 1.0f - std::pow(s.beta2, float(s.step)),
                                       .grad_scale = s.grad_scale};
  if (device == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::adamw_step(tensors, k);
#else
    detail::fail_no_cuda("adamw_step");
#endif
  }
  backend::cpu::adamw_step(tensors, k);
}

double sum_of_squares(std::span<const Tensor* const> tensors) {
  if (tensors.empty()) return 0.0;
  std::vector<backend::cpu::F32Block> blocks;
  blocks.reserve(tensors.size());
  const Device device = tensors[0]->device();
  for (const Tensor* t : tensors) {
    BRIOCHE_CHECK(t->device() == device, "sum_of_squares: tensors on different devices (", t->describe(), ")");
    BRIOCHE_CHECK(t->defined() && t->dtype() == DType::F32 && t->is_contiguous(),
                  "sum_of_squares: expected contiguous f32 tensors, got ", t->describe());
    blocks.push_back({t->data_as<float>(), t->numel()});
  }
  if (device == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::sum_of_squares(blocks);
#else
    detail::fail_no_cuda("sum_of_squares");
#endif
  }
  return backend::cpu::sum_of_squares(blocks);
}

}  // namespace brioche::ops
