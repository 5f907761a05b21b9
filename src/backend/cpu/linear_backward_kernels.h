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

}  // namespace brioche::backend::cpu
