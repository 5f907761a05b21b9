// CPU embedding lookup: decode table rows to f32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace brioche::cpu {

struct EmbeddingArgs {
  DType dtype = DType::F32;
  const void* table = nullptr;  // [vocab, hidden] rows of dtype
  size_t row_bytes = 0;         // stride between table rows
  int64_t vocab = 0, hidden = 0;
  const int32_t* ids = nullptr;  // [n_ids]
  int64_t n_ids = 0;
  float* out = nullptr;  // [n_ids, hidden], row stride ldo floats
  int64_t ldo = 0;
};

// Throws brioche::Error naming the first id outside [0, vocab).
void embedding(const EmbeddingArgs& args);

}  // namespace brioche::cpu
