// LoRA updates applied per row group, unmerged (math in ops/lora_rows.h).
// The argument structs are shared with the CUDA kernels.
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

// One group of consecutive rows that use one adapter's factors.
struct LoraRowsSegment {
  int32_t first_row = 0, n_rows = 0, rank = 0;
  const uint16_t* a = nullptr;   // f16 [rank, in] row-major
  const uint16_t* bt = nullptr;  // f16 [rank, out] row-major: s·Bᵀ
};

struct LoraRowsArgs {
  const float* x;  // [rows, in], row stride ldx
  float* y;        // [rows, out], row stride ldy
  float* u;        // [rows, max_rank] scratch, row stride ldu: the shrink's output
  int64_t in, out, ldx, ldy, ldu;
  const LoraRowsSegment* segments;
  int32_t n_segments;
};

// The largest rank the kernels take.
inline constexpr int32_t kMaxLoraRowsRank = 512;

void lora_rows_add(const LoraRowsArgs& args);

}  // namespace brioche::backend::cpu
