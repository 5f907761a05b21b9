// Backward of y = x·Wᵀ: the input gradient (through a frozen weight of any
// dtype) and the weight gradient (for f32 trainable factors such as LoRA's).
#pragma once

#include "core/tensor.h"

namespace brioche::ops {

enum class GradWrite : uint8_t { Overwrite, Accumulate };

// dx[n, k] (=|+=) dy[n, m] · w[m, k]
//   dy : f32, rows contiguous                    // [n_tokens, out_features]
//   w  : any dtype (f32, f16, bf16, quantized)   // [out_features, in_features]
//   dx : f32, rows contiguous                    // [n_tokens, in_features]
// Quantized rows are dequantized in tiles, never the whole matrix at once.
// On CUDA (cuBLASLt, f32 accumulation): f32 weights in full f32; bf16, f16
// and quantized weights against a bf16 copy of dy (f16/quantized expanded to
// bf16 tiles of ≤ 128 MB): NMSE ≈ 1e-6 against the CPU (bf16 class).
void matmul_input_grad(const Tensor& dy, const Tensor& w, Tensor& dx, GradWrite mode);

// dw[m, k] += Σ_n dy[n, m] · x[n, k]     (parameter gradients accumulate)
//   dy : f32 [n_tokens, m], x : f32 [n_tokens, k], dw : f32 [m, k]
// On CUDA: full f32 GEMM (no TF32; bound by reading dy and x anyway).
void matmul_weight_grad(const Tensor& dy, const Tensor& x, Tensor& dw);

}  // namespace brioche::ops
