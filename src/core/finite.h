// Where a float array first holds a NaN or an infinity: what a loader names
// when it refuses a tensor whose non-finite values would poison every result.
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>

namespace brioche {

inline std::optional<int64_t> first_non_finite(std::span<const float> values) {
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i])) return int64_t(i);
  return std::nullopt;
}

}  // namespace brioche
