// Conversions between f32 and every storage dtype, row by row.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace brioche::ops {

// dst[0..n) = src row of `dtype` decoded to f32; n is a multiple of the block.
void dequantize_row(DType dtype, const void* src, float* dst, int64_t n);

// Encode n f32 values into `dtype` (the reference quantizers: round to
// nearest, scales chosen as llama.cpp/MLX do), for tests and model writers.
void quantize_row(DType dtype, const float* src, void* dst, int64_t n);

// Whole-tensor conversion to a new contiguous tensor of `dtype` on the
// source's device. On CUDA: dense f32 → bf16 (rounded to nearest even) and
// bf16 → f32 (exact), what training's bf16 boundaries need.
Tensor convert(const Tensor& src, DType dtype);

}  // namespace brioche::ops
