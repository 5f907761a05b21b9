// Register blocks of the CPU matmul input gradient per instruction set
// (linear_backward.cpp picks one at run time).
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

// dx[i, c .. c + width) += Σ_{j in [m0, m1)} dy[i, j] · w[j - m0, c .. c + width)
// for i < rows (1 to 4); w is a tile of weight rows starting at row m0.
struct InputGradBlock {
  const float* dy;
  int64_t ld_dy;
  const float* w;
  int64_t ld_w, m0, m1;
  float* dx;
  int64_t ld_dx, c;
  int rows;
};

// width 32; the sum over j runs in the same order as the AVX2 block's.
void input_grad_block32_avx512(const InputGradBlock& block);

// An outer-product block of the weight gradient:
//   c[i, q] += Σ_{r < n} p[r, i] · v[r, q]   for i < p_count (1 to 8), q < q_count (1 to 48)
// c is [p_count, 48] contiguous (the caller copies the dw block in and out, in
// whichever orientation). Each c element is one FMA chain over r in order,
// starting from its value in c, so splitting n into calls is bit-identical to
// one call. p_count accumulator rows × 3 vectors stay in registers; each row of
// v is loaded once for the p_count broadcasts.
struct OuterBlock {
  const float* p;
  int64_t ld_p;
  const float* v;
  int64_t ld_v, n;
  float* c;
  int p_count, q_count;
};
void weight_grad_block_avx512(const OuterBlock& block);

}  // namespace brioche::backend::cpu
