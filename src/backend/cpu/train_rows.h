// CPU kernels of the row ops training adds (ops/dropout.h, ops/scaled_add.h,
// ops/gather_rows.h). The CUDA launchers (backend/cuda/train_kernels.h) take
// the same argument structs with device pointers.
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

struct DropoutArgs {
  const float* src;  // [n_rows, dim], row stride ld_src floats
  float* dst;        // [n_rows, dim], row stride ld_dst; may alias src
  int64_t n_rows, dim, ld_src, ld_dst;
  float p;
  uint64_t key;
  int64_t first_row;  // the mask's row number of row 0
};
void dropout(const DropoutArgs& args);

struct ScaledAddArgs {
  const float* x;  // [n_rows, dim], row stride ldx
  float* y;        // [n_rows, dim], row stride ldy: y += s·x
  int64_t n_rows, dim, ldx, ldy;
  float s;
};
void add_scaled(const ScaledAddArgs& args);

struct ScaleArgs {
  float* x;  // [n_rows, dim], row stride ldx: x *= s
  int64_t n_rows, dim, ldx;
  float s;
};
void scale(const ScaleArgs& args);
void fill(const ScaleArgs& args);  // x = s

struct RowIndexArgs {
  const float* src;     // gather: [n_src, dim];  scatter: [n, dim]
  float* dst;           // gather: [n, dim];      scatter: [n_dst, dim]
  const int32_t* rows;  // [n] (host memory)
  int64_t n, dim, ld_src, ld_dst;
};
void gather_rows(const RowIndexArgs& args);       // dst[i] = src[rows[i]]
void scatter_add_rows(const RowIndexArgs& args);  // dst[rows[i]] += src[i], i ascending

}  // namespace brioche::backend::cpu
