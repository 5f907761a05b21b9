// An f32 GEMM on AMX bf16 tiles, for the CPU training products through a
// decoded quantized weight (the forward and the matmul input gradient):
//
//   out[r, c] (+)= Σ_{t < T} a[r·lda + t] · B(t, c)     r < rows, c < width
//
// with B(t, c) = b[t·ldb + c] (dx = dy·W), or b[c·ldb + t] (y = x·Wᵀ).
//
// Each f32 operand is split into two bf16 numbers, x = hi + lo + ε with
// hi = bf16(x), lo = bf16(x − hi), |ε| ≤ 2⁻¹⁸|x|, and a product is summed as
// hi·hi + hi·lo + lo·hi in f32 (TDPBF16PS): the missing lo·lo and ε terms are
// ≤ ~2⁻¹⁶ of |a·b|, so the sums keep about the f32 kernels' accuracy (f32
// rounding of long sums is of the same order) at three bf16 products, where
// AMX does ~16 f32 FMA units' work in one. With `split` false only hi·hi is
// summed (plain bf16 inputs, ≤ 2⁻⁸ relative per product: what training
// uses, as the CUDA path's tensor cores do; the split runs 3× the products
// and measured ~2.2× slower per call).
//
// A is packed per call into bf16 tiles (rows padded to 32); B likewise (VNNI
// pairs of rows), unless it comes packed already: a quantized weight's tiles
// made by amx_pack_weight, once a run (ops/amx_weight_tiles.h) or per call.
// The products run on the global thread pool in blocks of 32 × 32 outputs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace brioche::backend::cpu {

struct AmxGemm {
  const float* a;  // [rows, T] rows lda apart
  int64_t lda;
  const float* b;  // [T, width] rows ldb apart; with b_transposed [width, T]
  int64_t ldb;
  float* out;  // [rows, width] rows ldo apart
  int64_t ldo;
  int64_t rows, width, T;
  bool accumulate;            // out += a·b, else out = a·b
  bool split = true;          // hi + lo (about f32), or bf16 inputs only
  bool b_transposed = false;  // B(t, c) = b[c·ldb + t]: y = x·Wᵀ with W [width, T] as stored
  // B already packed (amx_pack_weight, plain bf16): b, ldb, b_transposed are
  // not read, and split must be false.
  const uint16_t* b_tiles = nullptr;
};

// Needs cpu::amx_bf16_available().
void amx_gemm(const AmxGemm& g);

// Which product a weight W [m, k] is packed for, as amx_gemm's B:
//   Forward    y = x·Wᵀ   B(t, c) = W[c, t], T = k, width = m
//   InputGrad  dx = dy·W  B(t, c) = W[t, c], T = m, width = k
// The two pair different elements (AMX sums over pairs of t), so a weight
// used both ways has two packings.
enum class AmxWeightProduct : uint8_t { Forward, InputGrad };

struct AmxWeight {
  DType wtype;
  const void* w;  // [m, k] rows of wtype, rows w_row_bytes apart
  size_t w_row_bytes;
  int64_t m, k;
  AmxWeightProduct product;
};

// uint16 elements amx_pack_weight writes (T and width padded to 32).
size_t amx_weight_tiles_size(const AmxWeight& w);

// W decoded row block by row block (in parallel, each block in one thread's
// cache) straight into B's bf16 tiles for `product`: the same bits as
// amx_gemm packing the f32 decoded weight with split false.
void amx_pack_weight(const AmxWeight& w, uint16_t* tiles);

}  // namespace brioche::backend::cpu
