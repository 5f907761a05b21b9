// CPU kernels of ops/adamw.h (the math is there).
#pragma once

#include <cstdint>
#include <span>

namespace brioche::backend::cpu {

struct AdamWTensor {
  float* param;       // [n]
  const float* grad;  // [n]
  float* m;           // [n]
  float* v;           // [n]
  int64_t n;
  float lr;  // this tensor's learning rate (LoRA+ applied)
};

struct AdamWConstants {
  float beta1, beta2, eps, weight_decay;
  float c1, c2;  // bias corrections 1 − βᵗ
  float grad_scale;
};
void adamw_step(std::span<const AdamWTensor> tensors, const AdamWConstants& k);

struct F32Block {
  const float* data;
  int64_t n;
};
double sum_of_squares(std::span<const F32Block> blocks);

}  // namespace brioche::backend::cpu
