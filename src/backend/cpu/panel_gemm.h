// A small f32 GEMM through AVX-512 register panels, for the CPU training
// kernels whose operands are already f32 rows (the matmul input gradient
// through a decoded weight tile, the training attention's blocks, LoRA's
// low-rank products):
//
//   out[r, c] (+)= Σ_{t < T} A(r, t) · b[t·ldb + c]     r < rows, c < width
//
// A(r, t) is read at a[r·sr + t·st], so A may be a matrix or the transpose
// of one. Each output element is one FMA chain over t in order, starting
// from its old value when accumulating: splitting T into calls in order, or
// the rows or columns into blocks, gives the same bits. Panels hold 6 rows ×
// 64 columns of accumulators (12 rows × 16 columns for width ≤ 16), so each
// B row is loaded once for several broadcasts of A.
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

struct PanelGemm {
  const float* a;
  int64_t sr, st;  // A(r, t) = a[r·sr + t·st]
  const float* b;  // [T, width] rows ldb apart
  int64_t ldb;
  float* out;  // [rows, width] rows ldo apart
  int64_t ldo;
  int64_t rows, width, T;
  bool accumulate;
};

// Needs AVX-512 (cpu::active_isa() >= Isa::Avx512).
void panel_gemm_avx512(const PanelGemm& g);

}  // namespace brioche::backend::cpu
