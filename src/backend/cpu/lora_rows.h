// LoRA updates applied per row group, unmerged (math in ops/lora_rows.h).
// The argument structs are shared with the CUDA kernels.
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

// One group of consecutive rows that use one adapter's factors.
struct LoraRowsSegment {
  int32_t first_row = 0, n_rows = 0, rank = 0;
  const float* a = nullptr;   // [rank, in] row-major
  const float* bt = nullptr;  // [rank, out] row-major: s·Bᵀ
};

struct LoraRowsArgs {
  const float* x;  // [rows, in], row stride ldx
  float* y;        // [rows, out], row stride ldy
  float* u;        // [rows, max_rank] scratch, row stride ldu (the CUDA path's shrink output)
  int64_t in, out, ldx, ldy, ldu;
  const LoraRowsSegment* segments;
  int32_t n_segments;
};

// The largest rank the kernels take: the CPU keeps u on the stack.
inline constexpr int32_t kMaxLoraRowsRank = 512;

void lora_rows_add(const LoraRowsArgs& args);

}  // namespace brioche::backend::cpu
