// Projections with a low-rank (LoRA) update beside a frozen weight, for the
// rows of one input shared by 1–3 of them (Q, K, V; gate and up):
//
//   forward   y_i = x·W_iᵀ + u_i·B_iᵀ,      u_i = s_i · x·A_iᵀ      (u_i saved)
//   backward  g_i = s_i · dy_i·B_i                                 [n, r]
//             dB_i += dy_iᵀ·u_i,   dA_i += g_iᵀ·x
//             dx (=|+=) Σ_i dy_i·W_i + g_i·A_i
//
// On the CPU these are the plain ops in sequence, in f32. On CUDA (many rows,
// bf16 or quantized W, every width a multiple of 8) every product runs on
// tensor cores from one bf16 copy of x and of each dy: the rank-r products
// too, with bf16 copies of A, B, u and g (rank padded to a multiple of 8 with
// zeros) and f32 accumulation, and the low-rank term written first so the
// base GEMM adds onto it (β = 1) instead of a second pass over y or dx.
// That is PEFT's bf16 arithmetic; the f32 path of the same ops stays for f32
// and f16 weights and for odd shapes.
//
// Where the tensor-core path runs (lora_matmul_on_tensor_cores), x and dy
// may also come as dense bf16 matrices: they are then used as they are (a
// producer such as ops::swiglu wrote them in bf16 instead of f32 + a copy).
#pragma once

#include <span>

#include "core/tensor.h"
#include "ops/linear_backward.h"

namespace brioche::ops {

// LoRA's factors of one projection: A [r, in], B [out, r], f32 contiguous.
struct LowRank {
  const Tensor& a;
  const Tensor& b;
  float scale;
};

struct LoraMatmulPart {
  const Tensor& w;          // frozen [out, in], any dtype
  const LowRank* low_rank;  // nullptr: y = x·Wᵀ only
  Tensor& y;                // [n, out] f32, written
  Tensor* u;                // [n, r] f32, written when low_rank
};
void lora_matmul(const Tensor& x, std::span<const LoraMatmulPart> parts);

// Whether projections of these weights over n rows of `in` features on
// `device` take the tensor-core path (and so accept bf16 x and dy).
bool lora_matmul_on_tensor_cores(Device device, int64_t n, int64_t in, std::span<const Tensor* const> weights);

struct LoraMatmulGradPart {
  const Tensor& w;
  const LowRank* low_rank;  // nullptr: dx gets dy·W only
  const Tensor* u;          // [n, r] from the forward (when low_rank)
  const Tensor& dy;         // [n, out] f32 (or bf16, see above)
  Tensor* grad_a;           // [r, in] f32, += (when low_rank)
  Tensor* grad_b;           // [out, r] f32, +=
};
// x [n, in] is the forward's input; dx [n, in] f32 is written (Overwrite) or
// added to (Accumulate) by the sum over the parts.
void lora_matmul_backward(const Tensor& x, std::span<const LoraMatmulGradPart> parts, Tensor& dx, GradWrite mode);

}  // namespace brioche::ops
