// Embedding lookup: rows of a (possibly quantized) table, dequantized to f32.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace brioche::ops {

// out[i, :] = table[ids[i], :]
//   table : any dtype   // [vocab, hidden]
//   out   : f32         // [ids.size(), hidden]
// An id outside [0, vocab) is an error naming the id.
void embedding(const Tensor& table, std::span<const int32_t> ids, Tensor& out);

}  // namespace brioche::ops
