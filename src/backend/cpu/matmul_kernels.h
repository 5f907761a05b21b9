// Per-ISA matmul kernels (internal to backend/cpu).
//
// Each ISA file (matmul_avx2.cpp, matmul_avx512.cpp, matmul_avx512_vnni.cpp)
// compiles the same kernel source, matmul_kernels.inc, for its instruction
// set and exports one table. The driver (matmul.cpp) does the threading:
// it quantizes activations once, then hands each thread a range of weight rows.
// Single activation rows (decode) use the row kernels, several rows the
// column kernels (matmul_columns.inc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/quant_act.h"
#include "backend/cpu/read_ahead.h"
#include "core/dtype.h"

namespace brioche::cpu {

// y[c, r] for c in [0, n), r in [row_begin, row_end): rows of a quantized w
// against 8-bit activations.
struct QuantRowsJob {
  DType wtype;
  const uint8_t* w;           // [m, k] in wtype blocks
  size_t w_row_bytes;         // stride between weight rows
  const QuantizedActs* acts;  // [n, k]
  float* y;                   // [n, m]
  int64_t ldy;                // floats between rows of y
  int64_t row_begin, row_end;
};

// Same with activations in the column layout (n >= 2, matmul_columns.inc).
struct QuantColumnsJob {
  DType wtype;
  const uint8_t* w;  // [m, k] in wtype blocks
  size_t w_row_bytes;
  const ColumnActs* acts;  // [n, k]
  float* y;                // [n, m]
  int64_t ldy;
  int64_t row_begin, row_end;
  ReadAheadLines read_ahead = {};
};

// Same for 1-3 activation rows (decode), with the column kernels' arithmetic.
struct QuantFewJob {
  DType wtype;
  const uint8_t* w;  // [m, k] in wtype blocks
  size_t w_row_bytes;
  const BlockActs* acts;  // [n, k], n <= kMaxFewRows
  float* y;               // [n, m]
  int64_t ldy;
  int64_t row_begin, row_end;
  ReadAheadLines read_ahead = {};
};
constexpr int kMaxFewRows = 3;

// Same for f32/f16/bf16 weights against f32 activations x.
struct FloatRowsJob {
  DType wtype;
  const uint8_t* w;  // [m, k]
  size_t w_row_bytes;
  const float* x;  // [n, k]
  int64_t ldx;
  int64_t n, k;
  float* y;  // [n, m]
  int64_t ldy;
  int64_t row_begin, row_end;
};

struct MatmulKernels {
  void (*quant_rows)(const QuantRowsJob& job);
  void (*float_rows)(const FloatRowsJob& job);
  int rows_per_tile;  // weight rows one tile handles (threads split on multiples)
  void (*quant_columns)(const QuantColumnsJob& job);
  bool (*quant_columns_supports)(DType wtype);
  int column_tile_rows;                       // weight rows one column-kernel tile handles
  void (*quant_few)(const QuantFewJob& job);  // for the column-kernel types
  int few_tile_rows;
};

const MatmulKernels& matmul_kernels_avx2();
const MatmulKernels& matmul_kernels_avx512();
const MatmulKernels& matmul_kernels_avx512_vnni();

}  // namespace brioche::cpu
