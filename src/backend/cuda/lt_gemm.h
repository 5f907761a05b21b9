// One cuBLASLt GEMM with f32 output (or 16-bit, of the inputs' type), shared
// by the forward matmul, the backward matmuls and the fused log-prob head
// (include from .cu files only).
//
// Column-major, as cuBLASLt sees it: C[m, n] = alpha · op(A)·op(B) + beta · C,
// op(A) m×k, op(B) k×n. A row-major [r, c] matrix with row stride ld is the
// column-major c×r matrix with the same ld.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_check.h"

namespace brioche::cuda::detail {

struct GemmDesc {
  cudaDataType_t ab_type;  // A and B element type
  cublasComputeType_t compute;
  const void* a;
  int64_t lda;  // ld in elements
  const void* b;
  int64_t ldb;
  void* c;
  int64_t ldc;  // output, of c_type
  // f32, or the inputs' own 16-bit type (bf16 → bf16, f16 → f16; still
  // accumulated in f32, rounded once at the store) for outputs that only a
  // 16-bit reader takes: those are written, never accumulated into (beta 0).
  cudaDataType_t c_type = CUDA_R_32F;
  int64_t m, n, k;
  float beta = 0.0f;                     // c = alpha·op(a)·op(b) + beta·c
  cublasOperation_t op_a = CUBLAS_OP_T;  // the forward's y = x·wᵀ: A = w transposed, B = x
  cublasOperation_t op_b = CUBLAS_OP_N;
  float alpha = 1.0f;
};

// Bytes per value of a GemmDesc output of type t (f32, or a 16-bit type).
inline size_t output_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// Algorithm per shape found once by cuBLASLt's heuristic; 32 MB workspace.
void lt_gemm(const GemmDesc& g);

}  // namespace brioche::cuda::detail
