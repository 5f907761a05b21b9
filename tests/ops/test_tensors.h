// Input tensors for the ops tests: seeded normal values, row-padded views.
#pragma once

#include <cstdint>
#include <random>

#include "core/tensor.h"

namespace brioche {

// [rows, cols] f32 of N(0, scale²) values from seed.
inline Tensor random_f32(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  Tensor t = Tensor::zeros(DType::F32, {rows, cols});
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < rows * cols; ++i) p[i] = dist(rng);
  return t;
}

// A copy of src as a [rows, cols] view whose rows are `pad` floats apart beyond cols.
inline Tensor padded(const Tensor& src, int64_t pad) {
  const int64_t rows = src.dim(0), cols = src.dim(1);
  Tensor big = Tensor::zeros(DType::F32, {rows, cols + pad});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) big.row_as<float>(r)[c] = src.row_as<float>(r)[c];
  return big.slice(1, 0, cols);
}

}  // namespace brioche
