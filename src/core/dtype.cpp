#include "core/dtype.h"

namespace brioche {

bool parse_dtype(std::string_view name, DType* out) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (dtype_name(DType(i)) == name) {
      *out = DType(i);
      return true;
    }
  }
  return false;
}

bool affine_dtype(int bits, int group_size, DType* out) {
  static constexpr struct {
    int bits, group;
    DType type;
  } kTable[] = {
      {4, 32, DType::AFFINE4_G32}, {4, 64, DType::AFFINE4_G64}, {4, 128, DType::AFFINE4_G128},
      {8, 32, DType::AFFINE8_G32}, {8, 64, DType::AFFINE8_G64}, {8, 128, DType::AFFINE8_G128},
  };
  for (const auto& row : kTable) {
    if (row.bits == bits && row.group == group_size) {
      *out = row.type;
      return true;
    }
  }
  return false;
}

}  // namespace brioche
