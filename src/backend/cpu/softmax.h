// CPU softmax kernel over rows, in place.
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

// x: [n_rows, n], row stride `stride` floats.
void softmax(float* x, int64_t n_rows, int64_t n, int64_t stride);

}  // namespace brioche::backend::cpu
