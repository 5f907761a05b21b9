// ops::uninitialized in the test binaries: tests/poison_env.cpp turns on
// BRIOCHE_POISON before main, so every fresh activation starts as NaN and a
// kernel that reads one before writing it fails its comparison. Programs
// leave the bytes unfilled; here the switch must be on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/env_switch.h"
#include "ops/device.h"

namespace brioche {
namespace {

TEST(Uninitialized, TestBinariesFillCpuBuffersWithNan) {
  ASSERT_TRUE(env_flag_set("BRIOCHE_POISON")) << "tests/poison_env.cpp should set BRIOCHE_POISON=1";
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    // Several sizes: small ones come from the heap, large ones from fresh pages.
    for (int64_t n : {int64_t(7), int64_t(4096), int64_t(1) << 20}) {
      Tensor t = ops::uninitialized(dtype, {2, n}, Device::CPU);
      ASSERT_EQ(t.dim(0), 2);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u) << "64-byte aligned";
      const auto* bytes = static_cast<const uint8_t*>(t.data());
      for (size_t i = 0; i < t.nbytes(); ++i) ASSERT_EQ(bytes[i], 0xFF) << dtype_name(dtype) << " byte " << i;
      if (dtype == DType::F32) EXPECT_TRUE(std::isnan(t.data_as<float>()[0]));
    }
  }
}

}  // namespace
}  // namespace brioche
