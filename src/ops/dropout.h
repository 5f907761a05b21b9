// Inverted dropout with a replayable mask (LoRA-input dropout): the mask of
// element (row, col) is core/dropout_hash.h's pure function of the stream
// key, identical on the CPU and on CUDA, so a recompute (segmented backward)
// or the backward's drop' reproduces the forward's mask without storing it.
#pragma once

#include <cstdint>

#include "core/dropout_hash.h"
#include "core/tensor.h"

namespace brioche::ops {

struct DropoutMask {
  float p = 0.0f;    // drop probability in [0, 1)
  uint64_t key = 0;  // dropout_key(step_seed, layer, module)
  // The batch row of the tensor's row 0: a slice of the batch's rows (the
  // MLP in row chunks) passes its first row, so it draws the batch's mask.
  int64_t first_row = 0;
  bool active() const { return p > 0.0f; }
};

// dst[r, c] = src[r, c] · dropout_factor(key, p, first_row + r, c)
//   src, dst : f32 [n_rows, dim], rows contiguous, same device; dst may alias src.
// Row numbers are the batch's (first_row + r): recomputes, whole or in row
// chunks, replay the same mask.
void dropout(const Tensor& src, const DropoutMask& mask, Tensor& dst);

}  // namespace brioche::ops
