// Which architectures this build can run on CUDA (Model::has_cuda_kernels):
// `--device auto` falls back to the CPU for the ones that cannot.
#include <gtest/gtest.h>

#include <string>

#include "model/model.h"

namespace brioche::model {
namespace {

const std::string kSource = BRIOCHE_SOURCE_DIR;

TEST(DeviceSupport, EveryArchitectureRunsOnCuda) {
  EXPECT_TRUE(Model::has_cuda_kernels(kSource + "/tests/model/golden/tiny_llama"));
  EXPECT_TRUE(Model::has_cuda_kernels(kSource + "/tests/model/golden/tiny_qwen3"));
  for (const char* dir : {"gemma4/mix", "gemma4/e2b", "gemma4/moe", "qwen35/dense", "qwen35/moe",
                          "qwen35/gguf/dense.f32.gguf", "qwen35/gguf/moe.f32.gguf"})
    EXPECT_TRUE(Model::has_cuda_kernels(kSource + "/tests/fixtures/" + dir)) << dir;
}

}  // namespace
}  // namespace brioche::model
