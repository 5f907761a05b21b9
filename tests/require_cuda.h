// The first line of a CUDA test: without a device the test is skipped with a
// line saying so (CI's machine has the toolkit but no GPU), not passed.
#pragma once
#include <gtest/gtest.h>

#include "ops/device.h"

#define REQUIRE_CUDA_DEVICE() \
  if (!::brioche::ops::cuda_available()) GTEST_SKIP() << "skipped: no CUDA device"
