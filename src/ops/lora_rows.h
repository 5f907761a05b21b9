// Unmerged LoRA for a batch whose rows use different adapters, or none
// (serving many adapters in one batch: S-LoRA / Punica):
//
//   y[r] += (x[r]·A_gᵀ)·bt_g      for every row r of segment g
//
// A_g [rank, in] and bt_g = s_g·B_gᵀ [rank, out] are f16 on the tensors'
// device (the adapter's scale folded into bt once, at load); x, y and the
// sums are f32. Decoding reads every factor of the batch's adapters each
// step, so their bytes are its cost: f16 halves them, at one rounding of
// each factor (2^-11 relative). Rows outside
// every segment keep y. One call per projection whatever the adapters: a
// shrink (u = x·Aᵀ) and an expand (y += u·bt), on the CPU two parallel
// loops over blocks of a segment's rows (each factor row read once per
// block), on CUDA two launches (backend/cuda/lora_rows.h).
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace brioche::ops {

struct LoraRows {
  int32_t first_row = 0, n_rows = 0;
  const Tensor* a = nullptr;   // [rank, in]
  const Tensor* bt = nullptr;  // [rank, out]
};

// The largest adapter rank the op takes.
int32_t max_lora_rows_rank();

// x [n, in] f32 rows, y [n, out] f32 rows (strided views allowed), segments
// inside [0, n) and disjoint; u_scratch f32 [n, ≥ the largest rank]
// receives x·Aᵀ (the shrink's output) for the segments' rows.
void lora_rows_add(const Tensor& x, std::span<const LoraRows> segments, Tensor& y, Tensor& u_scratch);

}  // namespace brioche::ops
