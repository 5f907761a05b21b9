#include "ops/quantize.h"

#include <vector>

#include "backend/cpu/quant_ref.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace brioche::ops {

void dequantize_row(DType dtype, const void* src, float* dst, int64_t n) {
  cpu::dequantize_row_ref(dtype, src, dst, n);
}

void quantize_row(DType dtype, const float* src, void* dst, int64_t n) {
  cpu::quantize_row_ref(dtype, src, dst, n);
}

Tensor convert(const Tensor& src, DType dtype) {
  BRIOCHE_CHECK(src.defined(), "convert: source tensor is undefined");
  BRIOCHE_CHECK(src.device() == Device::CPU, "convert: source ", src.describe(),
                " is on CUDA but the CUDA backend is not built");
  BRIOCHE_CHECK(src.rank() >= 1, "convert: source must have rank >= 1");
  BRIOCHE_CHECK(src.dtype() != DType::I32 && dtype != DType::I32, "convert: i32 is not convertible, got ",
                src.describe(), " -> ", dtype_name(dtype));
  const int rank = src.rank();
  const int64_t cols = src.dim(-1);
  for (DType t : {src.dtype(), dtype}) {
    BRIOCHE_CHECK(cols % dtype_info(t).block_elems == 0, "convert: innermost size ", cols,
                  " is not a multiple of the ", dtype_name(t), " block size ", dtype_info(t).block_elems);
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
