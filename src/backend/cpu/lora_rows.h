// LoRA updates applied per row group, unmerged (math in ops/lora_rows.h).
// The argument structs are shared with the CUDA kernels.
#pragma once

#include <cstdint>
#include <span>

namespace brioche::backend::cpu {

// One group of consecutive rows that use one adapter's factors.
struct LoraRowsSegment {
  int32_t first_row = 0, n_rows = 0, rank = 0;
  const uint16_t* a = nullptr;   // f16 [rank, in] row-major
  const uint16_t* bt = nullptr;  // f16 [rank, out] row-major: s·Bᵀ
  // On the CPU, a factor may come in Q8_0 by block column instead
  // (ops::lora_factor_q8_0: half the bytes, read as one stream), its f16
  // pointer then null.
  const uint8_t* a_q8 = nullptr;   // Q8_0 [in / 32, rank · 32]
  const uint8_t* bt_q8 = nullptr;  // Q8_0 [out / 32, rank · 32]: s·Bᵀ
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
// Several projections of one x (Q/K/V, gate/up) in one pool dispatch: each
// task shrinks and expands one row block of one part, so x's rows are read
// while hot and no barrier separates shrink from expand. A part's u may be
// null (the shrink's output stays local); non-null ones must not overlap.
void lora_rows_add_group(std::span<const LoraRowsArgs> parts);

// One adapter's factors of one projection in a LoRA table (ops/lora_rows.h:
// lora_table_add); a null `a` where the adapter leaves the projection alone.
struct LoraFactors {
  const uint16_t* a = nullptr;   // f16 [rank, in]
  const uint16_t* bt = nullptr;  // f16 [rank, out]: s·Bᵀ
  int32_t rank = 0;
  int32_t unused = 0;
};
static_assert(sizeof(LoraFactors) == 24, "LoraFactors travels as six 32-bit words");

// Up to three projections of one x (Q/K/V, gate/up) through a LoRA table:
// for each row r with slot s = row_slot[r] ≥ 0 and each part p,
//   f = factors[s·slot_stride + entry[p]],  u[r, p·rank_cap + k] = A_f[k]·x[r]  (k < f.rank)
//   y_p[r] += Σ_k u[r, p·rank_cap + k]·bt_f[k]
inline constexpr int kLoraTableParts = 3;
struct LoraTableArgs {
  const float* x;  // [n_rows, in], row stride ldx
  int64_t ldx, in;
  int32_t n_rows;
  const int32_t* row_slot;     // [n_rows]: the row's adapter slot, −1 for none
  const LoraFactors* factors;  // [slots · slot_stride]
  int32_t slot_stride;
  int32_t rank_cap;  // ≥ every rank the table holds
  int32_t n_parts;
  int32_t entry[kLoraTableParts];
  float* y[kLoraTableParts];  // [n_rows, out[p]], row stride ldy[p]
  int64_t ldy[kLoraTableParts], out[kLoraTableParts];
  float* u;  // [n_rows, n_parts · rank_cap] scratch, row stride ldu
  int64_t ldu;
  // Shrink of x̂ = RMSNorm(x)·norm_w instead of x, when norm_w [in] is set:
  //   u[r, ·k] = rstd_r·Σ_c A_f[k, c]·norm_w[c]·x[r, c],  rstd_r = 1/√(mean_c x[r, c]² + norm_eps)
  // so a base projection that normalises x inside its own GEMV needs no x̂
  // written for the low-rank terms.
  const float* norm_w = nullptr;
  float norm_eps = 0.0f;
  // Expand of gate and up (parts 0 and 1, of equal width) into SwiGLU, when
  // swiglu_out is set: for every row (adapted or not)
  //   swiglu_out[r, c] = silu(g)·v,  g = y_0[r, c] + term_0,  v = y_1[r, c] + term_1
  // y_0 and y_1 are read, not written; swiglu_out (row stride ld_swiglu) may be y_0.
  float* swiglu_out = nullptr;
  int64_t ld_swiglu = 0;
};
// The table path's two halves: the shrink writes u from x (or x̂), the
// expand adds u·bt to each y, or writes their SwiGLU (it reads neither x nor
// `in`).
void lora_table_shrink(const LoraTableArgs& args);
void lora_table_expand(const LoraTableArgs& args);

}  // namespace brioche::backend::cpu
