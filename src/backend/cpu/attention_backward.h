// CPU dense training attention (see ops/attention_backward.h for the math).
#pragma once

#include <cstdint>

#include "ops/attention_backward.h"

namespace brioche::backend::cpu {

struct DenseAttentionArgs {
  const float* q;     // [n, H·d]  (all row strides in floats)
  const float* k;     // [n, KV·d]
  const float* v;     // [n, KV·d]
  const float* out;   // [n, H·d]  written by forward, read by backward
  const float* lse;   // [n, H]    written by forward, read by backward
  const float* dout;  // [n, H·d]  backward only
  float* out_w;       // forward outputs
  float* lse_w;
  float* dq;  // backward outputs
  float* dk;
  float* dv;
  int64_t ld_q, ld_k, ld_v, ld_out, ld_lse, ld_dout, ld_dq, ld_dk, ld_dv;
  ops::DenseAttentionLayout layout;
  ops::DenseAttentionParams params;
};

void dense_attention(const DenseAttentionArgs& args);
void dense_attention_backward(const DenseAttentionArgs& args);

// The same as blocked matrix products in AVX-512 registers
// (attention_training_avx512.cpp); the two above call them when the CPU has
// AVX-512 and run their vector loops otherwise.
void dense_attention_avx512(const DenseAttentionArgs& args);
void dense_attention_backward_avx512(const DenseAttentionArgs& args);

}  // namespace brioche::backend::cpu
