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

// Grows as needed and is reused: one per thread that starts matmuls.
class ActScratch {
 public:
  // Lays out a QuantizedActs for [n_rows, k] (k a multiple of 32) in this buffer.
  QuantizedActs layout(int64_t n_rows, int64_t k);

 private:
  struct Free { void operator()(void* p) const; };
  std::unique_ptr<void, Free> buffer_;
  size_t bytes_ = 0;
};

// Quantizes rows [row_begin, row_end) of x (row stride ldx floats) into acts.
void quantize_acts(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end,
                   const QuantizedActs& acts);

}  // namespace brioche::cpu
