// Shape/dtype preconditions shared by the f32 element-wise ops.
#pragma once

#include <initializer_list>
#include <string_view>

#include "core/error.h"
#include "core/tensor.h"

namespace brioche::ops::detail {

// An f32 tensor (CPU or CUDA) viewed as rows of `dim` contiguous floats: rank 1 is one
// row, rank 2 is [rows, dim]; the row stride may be larger than dim.
struct F32Rows {
  float* data;
  int64_t n_rows, dim, stride;  // stride in floats
};

inline F32Rows f32_rows(const Tensor& t, std::string_view op, std::string_view what) {
  BRIOCHE_CHECK(t.defined(), op, ": ", what, " is undefined");
  BRIOCHE_CHECK(t.dtype() == DType::F32, op, ": ", what, " must be f32, got ", t.describe());
  BRIOCHE_CHECK(t.rank() == 1 || t.rank() == 2, op, ": ", what, " must be rank 1 or 2, got ", t.describe());
  BRIOCHE_CHECK(t.stride(-1) == 4, op, ": ", what, " rows must be contiguous, got ", t.describe());
  if (t.rank() == 1) return {t.data_as<float>(), 1, t.dim(0), t.dim(0)};
  BRIOCHE_CHECK(t.stride(0) % 4 == 0, op, ": ", what, " row stride must be whole floats");
  return {t.data_as<float>(), t.dim(0), t.dim(1), t.stride(0) / 4};
}

// A dense bf16 [rows, dim] CUDA tensor: the form in which the training
// paths on tensor cores take activations and gradients as they are.
inline void check_bf16_rows(const Tensor& t, int64_t rows, int64_t dim, std::string_view op, std::string_view what) {
  BRIOCHE_CHECK(t.defined() && t.dtype() == DType::BF16 && t.rank() == 2 && t.is_contiguous(), op, ": ", what,
                " must be a dense bf16 matrix, got ", t.defined() ? t.describe() : std::string("undefined"));
  BRIOCHE_CHECK(t.dim(0) == rows && t.dim(1) == dim, op, ": ", what, " must be [", rows, ", ", dim, "], got ",
                t.describe());
  BRIOCHE_CHECK(t.device() == Device::CUDA, op, ": bf16 ", what, " is for CUDA tensors (the CPU path is f32), got ",
                t.describe(), " on the cpu");
}

inline bool is_bf16(const Tensor& t) { return t.defined() && t.dtype() == DType::BF16; }

// An operand that is f32 rows, or a dense bf16 [rows, dim] CUDA matrix where
// the op takes one (the training MLP's tensor-core operands): its f32 view,
// or for bf16 the shape alone (no f32 data; the kernels read the bf16 data).
inline F32Rows f32_or_bf16_rows(const Tensor& t, int64_t rows, int64_t dim, std::string_view op,
                                std::string_view what) {
  if (!is_bf16(t)) return f32_rows(t, op, what);
  check_bf16_rows(t, rows, dim, op, what);
  return {nullptr, rows, dim, dim};
}

// The device all of an op's tensors live on; mixing devices is an error.
inline Device common_device(std::string_view op, std::initializer_list<const Tensor*> tensors) {
  Device d = (*tensors.begin())->device();
  for (const Tensor* t : tensors) {
    BRIOCHE_CHECK(t->device() == d, op, ": tensors on different devices (", t->describe(), " on ",
                  device_name(t->device()), ")");
  }
  return d;
}

// Fails for a CUDA tensor when the CUDA backend is not compiled in.
[[noreturn]] inline void fail_no_cuda(std::string_view op) {
  fail(op, ": tensors are on CUDA but this build has no CUDA backend (configure with --preset cuda)");
}

}  // namespace brioche::ops::detail
