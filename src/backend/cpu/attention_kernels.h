// The two inner loops of CPU decode/prefill attention, per instruction set.
// attention.cpp walks the paged cache and does the softmax; these score one
// run of keys and add one run of weighted values. The AVX-512 versions need
// head_dim % 16 == 0.
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

// Keys and values are f32 or f16 (uint16_t) cache slots, `slot_stride`
// elements apart (one slot holds every kv head of a position).
template <typename T>
struct AttentionKernels {
  // scores[j] = scale · q·k_j for n keys.
  void (*score_keys)(const float* q, const T* k, int64_t slot_stride, int d, int64_t n, float scale, float* scores);
  // acc[0..d) += Σ_j probs[j] · v_j for n values.
  void (*accumulate_values)(const float* probs, const T* v, int64_t slot_stride, int d, int64_t n, float* acc);
};

const AttentionKernels<float>& attention_kernels_avx512_f32();
const AttentionKernels<uint16_t>& attention_kernels_avx512_f16();

}  // namespace brioche::backend::cpu
