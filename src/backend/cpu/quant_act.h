// Activations quantized to 8 bits for integer dot products against
// quantized weights.
//
// Each row of x is cut into 32-element blocks a_b with scale da_b = max|a_b|/127
// and int8 q_b = round(a_b / da_b). The kernels work on "lanes" of 4
// consecutive elements (what vpmaddubsw+vpmaddwd and vpdpbusd sum into one
// int32), so per block we also keep, per lane l:
//   d_lanes[l] = da_b                       (the scale, repeated 8 times)
//   s_lanes[l] = da_b * Σ_{i in lane l} q_i  (for the weight offset term)
// A weight block decoded as w_i = dw_l * u_i + mw_l (per lane) then gives
//   Σ_i w_i a_i ≈ Σ_l dw_l * da * dot_l(u, q) + mw_l * s_lanes[l].
// Rows are padded with zero blocks to an even count so 512-bit kernels can
// always load two blocks.
#pragma once

#include <cstdint>
#include <memory>

namespace brioche::cpu {

struct QuantizedActs {
  int64_t n_rows = 0;
  int64_t n_blocks = 0;         // real 32-blocks per row (k / 32)
  int64_t n_blocks_padded = 0;  // even, >= n_blocks
  int8_t* q = nullptr;          // [n_rows, n_blocks_padded * 32]
  float* d_lanes = nullptr;     // [n_rows, n_blocks_padded * 8]
  float* s_lanes = nullptr;     // [n_rows, n_blocks_padded * 8]

  const int8_t* q_row(int64_t r) const { return q + r * n_blocks_padded * 32; }
  const float* d_row(int64_t r) const { return d_lanes + r * n_blocks_padded * 8; }
  const float* s_row(int64_t r) const { return s_lanes + r * n_blocks_padded * 8; }
};

// The same activations laid out for the batched kernels
// (matmul_columns.inc), which put one activation row in each 32-bit lane:
// rows are taken in groups of 16 ("columns" of y), and for group g, block b,
// quad t (elements 4t..4t+3 of the block) the 16 rows' four bytes sit side by
// side, so one 512-bit load gives 16 rows × 4 elements. The bytes are stored
// as q + 128 (unsigned, as vpdpbusd's unsigned operand wants); the kernel
// subtracts 128 * Σw once per weight block. Rows past n_rows in the last group
// are padding: q = 0 (stored 128), d = s = 0, so they add nothing.
struct ColumnActs {
  static constexpr int kGroup = 16;  // activation rows per group (one int32 lane each)
  int64_t n_rows = 0;
  int64_t n_blocks = 0;  // k / 32
  int64_t n_groups = 0;  // ceil(n_rows / 16)
  uint8_t* q = nullptr;  // [n_groups, n_blocks, 8 quads, 16 rows, 4] q + 128
  float* d = nullptr;    // [n_groups, n_blocks, 16] scale da
  float* s = nullptr;    // [n_groups, n_blocks, 16] da * Σq over the block

  const uint8_t* q_at(int64_t g, int64_t b) const { return q + (g * n_blocks + b) * 512; }
  const float* d_at(int64_t g, int64_t b) const { return d + (g * n_blocks + b) * kGroup; }
  const float* s_at(int64_t g, int64_t b) const { return s + (g * n_blocks + b) * kGroup; }
};

// A few activation rows (decode: 1-3) for the few-row kernel, with the
// column layout's per-block numbers (same rounding, same s), so both kernels
// do the same float arithmetic per output (see matmul_columns.inc).
struct BlockActs {
  int64_t n_rows = 0;
  int64_t n_blocks = 0;  // k / 32
  int8_t* q = nullptr;   // [n_rows, n_blocks, 32] int8 in element order
  float* d = nullptr;    // [n_rows, n_blocks] scale da
  float* s = nullptr;    // [n_rows, n_blocks] da * Σq over the block

  const int8_t* q_row(int64_t r) const { return q + r * n_blocks * 32; }
  const float* d_row(int64_t r) const { return d + r * n_blocks; }
  const float* s_row(int64_t r) const { return s + r * n_blocks; }
};

// Grows as needed and is reused: one per thread that starts matmuls.
class ActScratch {
 public:
  // Lays out a QuantizedActs for [n_rows, k] (k a multiple of 32) in this buffer.
  QuantizedActs layout(int64_t n_rows, int64_t k);
  // Lays out a ColumnActs for [n_rows, k] (k a multiple of 32) in this buffer.
  ColumnActs layout_columns(int64_t n_rows, int64_t k);
  // Lays out a BlockActs for [n_rows, k] (k a multiple of 32) in this buffer.
  BlockActs layout_blocks(int64_t n_rows, int64_t k);

 private:
  struct Free {
    void operator()(void* p) const;
  };
  char* reserve(size_t bytes);

  std::unique_ptr<void, Free> buffer_;
  size_t bytes_ = 0;
};

// Quantizes rows [row_begin, row_end) of x (row stride ldx floats) into acts.
void quantize_acts(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end, const QuantizedActs& acts);

// Quantizes rows [8 octet_begin, 8 octet_end) of x into the column layout,
// with the same rounding as quantize_acts. Rows in [n_rows, n_groups * 16)
// are written as padding, so callers cover octets up to n_groups * 2.
void quantize_acts_columns(const float* x, int64_t ldx, int64_t octet_begin, int64_t octet_end, const ColumnActs& acts);

// Quantizes the rows of x (row stride ldx floats) into acts (same rounding
// and s as the column layout).
void quantize_acts_blocks(const float* x, int64_t ldx, const BlockActs& acts);

}  // namespace brioche::cpu
