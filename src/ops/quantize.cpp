#include "ops/quantize.h"

#include <vector>

#include "backend/cpu/quant_ref.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/device.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#endif

namespace brioche::ops {

void dequantize_row(DType dtype, const void* src, float* dst, int64_t n) {
  cpu::dequantize_row_ref(dtype, src, dst, n);
}

void quantize_row(DType dtype, const float* src, void* dst, int64_t n) { cpu::quantize_row_ref(dtype, src, dst, n); }

#if BRIOCHE_CUDA
namespace {

// f32 <-> bf16 of a dense matrix on the device.
Tensor convert_on_cuda(const Tensor& src, DType dtype) {
  const bool to_bf16 = src.dtype() == DType::F32 && dtype == DType::BF16;
  BRIOCHE_CHECK(
      (to_bf16 || (src.dtype() == DType::BF16 && dtype == DType::F32)) && src.rank() == 2 && src.is_contiguous(),
      "convert: on CUDA only dense f32 <-> bf16 matrices, got ", src.describe(), " -> ", dtype_name(dtype));
  Tensor out = uninitialized(dtype, {src.dim(0), src.dim(1)}, Device::CUDA);  // (written whole)
  if (to_bf16)
    cuda::convert_rows_to_16bit({.x = src.data_as<float>(),
                                 .ldx = src.dim(1),
                                 .n = src.dim(0),
                                 .k = src.dim(1),
                                 .out = out.data(),
                                 .to_f16 = false});
  else
    cuda::bf16_to_f32(src.data(), src.numel(), out.data_as<float>());
  return out;
}

}  // namespace
#endif

Tensor convert(const Tensor& src, DType dtype) {
  BRIOCHE_CHECK(src.defined(), "convert: source tensor is undefined");
  if (src.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    return convert_on_cuda(src, dtype);
#else
    fail("convert: source ", src.describe(), " is on CUDA but the CUDA backend is not built");
#endif
  }
  BRIOCHE_CHECK(src.rank() >= 1, "convert: source must have rank >= 1");
  BRIOCHE_CHECK(src.dtype() != DType::I32 && dtype != DType::I32, "convert: i32 is not convertible, got ",
                src.describe(), " -> ", dtype_name(dtype));
  const int rank = src.rank();
  const int64_t cols = src.dim(-1);
  for (DType t : {src.dtype(), dtype}) {
    BRIOCHE_CHECK(cols % dtype_info(t).block_elems == 0, "convert: innermost size ", cols, " is not a multiple of the ",
                  dtype_name(t), " block size ", dtype_info(t).block_elems);
  }
  BRIOCHE_CHECK(dtype_info(src.dtype()).quantized || src.stride(-1) == int64_t(dtype_info(src.dtype()).block_bytes),
                "convert: source rows must be contiguous, got ", src.describe());
  Tensor out = Tensor::zeros(dtype, src.shape().data(), rank);
  const int64_t n_rows = cols == 0 ? 0 : src.numel() / cols;
  // Row r of a rank-R tensor: decompose r over the outer dims to honour strides.
  auto src_row = [&](int64_t r) {
    const char* p = static_cast<const char*>(src.data());
    for (int d = rank - 2; d >= 0; --d) {
      p += (r % src.dim(d)) * src.stride(d);
      r /= src.dim(d);
    }
    return p;
  };
  const size_t out_row_bytes = row_bytes(dtype, cols);
  ThreadPool::global().parallel_for(n_rows, 8, [&](int64_t r0, int64_t r1) {
    std::vector<float> tmp(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      cpu::dequantize_row_ref(src.dtype(), src_row(r), tmp.data(), cols);
      cpu::quantize_row_ref(dtype, tmp.data(), static_cast<char*>(out.data()) + r * out_row_bytes, cols);
    }
  });
  return out;
}

}  // namespace brioche::ops
