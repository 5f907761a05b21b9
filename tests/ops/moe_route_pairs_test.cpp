// ops::moe_route_pairs (the MoE routing of decode rows on their device) and
// the expert_matmul / scale_rows overloads that read its outputs there:
// on the CPU, moe_route's choice and weights in ascending expert order; on
// CUDA, the same experts as the CPU (ties included: equal logits pick the
// lower expert) and weights within float rounding, and the device-index
// overloads giving the host-index ops' bits. Without a GPU the CUDA tests
// report "skipped: no CUDA device".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/device.h"
#include "ops/moe.h"
#include "require_cuda.h"

namespace brioche::ops {
namespace {

// Router logits [rows, experts] with ties: every row repeats some values
// (rounded to quarters), so equal probabilities meet at the top-k border.
Tensor router_logits(int64_t rows, int64_t experts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  Tensor t = Tensor::zeros(DType::F32, {rows, experts});
  for (int64_t i = 0; i < rows * experts; ++i) t.data_as<float>()[i] = std::round(normal(rng) * 4.0f) / 4.0f;
  return t;
}

std::vector<float> expert_scales(int64_t experts) {
  std::vector<float> s;
  for (int64_t e = 0; e < experts; ++e) s.push_back(0.5f + 0.01f * float(e));
  return s;
}

template <typename T>
std::vector<T> host_vector(const Tensor& t) {
  const Tensor h = t.device() == Device::CPU ? t : to_device(t, Device::CPU);
  return std::vector<T>(h.data_as<T>(), h.data_as<T>() + h.numel());
}

struct Shape {
  int64_t rows, experts;
  int top_k;
};
const Shape kShapes[] = {{1, 4, 2}, {3, 8, 2}, {8, 33, 4}, {5, 128, 8}, {2, 40, 32}};

TEST(MoeRoutePairs, CpuIsMoeRouteInAscendingExpertOrder) {
  for (const Shape& s : kShapes) {
    const Tensor logits = router_logits(s.rows, s.experts, 3);
    const std::vector<float> scale = expert_scales(s.experts);
    Tensor expert = Tensor::zeros(DType::I32, {s.rows * s.top_k}),
           weight = Tensor::zeros(DType::F32, {s.rows * s.top_k});
    moe_route_pairs(logits, s.top_k, scale, expert, weight);
    const MoeRouting route = moe_route(logits, s.top_k, scale);
    for (int64_t r = 0; r < s.rows; ++r) {
      std::vector<std::pair<int32_t, float>> want;
      for (int k = 0; k < s.top_k; ++k)
        want.push_back({route.expert[size_t(r * s.top_k + k)], route.weight[size_t(r * s.top_k + k)]});
      std::sort(want.begin(), want.end());
      for (int k = 0; k < s.top_k; ++k) {
        EXPECT_EQ(expert.data_as<int32_t>()[r * s.top_k + k], want[size_t(k)].first) << "row " << r << " pair " << k;
        EXPECT_EQ(weight.data_as<float>()[r * s.top_k + k], want[size_t(k)].second) << "row " << r << " pair " << k;
      }
    }
  }
}

TEST(MoeRoutePairs, RefusesTopKPastTheLimitAndMisshapenOutputs) {
  const Tensor logits = router_logits(2, 40, 5);
  const std::vector<float> scale = expert_scales(40);
  Tensor expert = Tensor::zeros(DType::I32, {2 * 33}), weight = Tensor::zeros(DType::F32, {2 * 33});
  EXPECT_THROW(moe_route_pairs(logits, 33, scale, expert, weight), Error);
  Tensor short_expert = Tensor::zeros(DType::I32, {3}), w4 = Tensor::zeros(DType::F32, {4});
  EXPECT_THROW(moe_route_pairs(logits, 2, scale, short_expert, w4), Error);
}

TEST(MoeRoutePairs, CudaChoosesTheCpuExperts) {
  REQUIRE_CUDA_DEVICE();
  for (const Shape& s : kShapes) {
    const Tensor logits = router_logits(s.rows, s.experts, 9);
    const std::vector<float> scale = expert_scales(s.experts);
    const int64_t pairs = s.rows * s.top_k;
    Tensor expert = Tensor::zeros(DType::I32, {pairs}), weight = Tensor::zeros(DType::F32, {pairs});
    moe_route_pairs(logits, s.top_k, scale, expert, weight);
    Tensor d_expert = zeros(DType::I32, {pairs}, Device::CUDA), d_weight = zeros(DType::F32, {pairs}, Device::CUDA);
    moe_route_pairs(to_device(logits, Device::CUDA), s.top_k, scale, d_expert, d_weight);
    EXPECT_EQ(host_vector<int32_t>(d_expert), host_vector<int32_t>(expert))
        << s.rows << " rows, " << s.experts << " experts, top " << s.top_k;
    const std::vector<float> got = host_vector<float>(d_weight), want = host_vector<float>(weight);
    for (size_t p = 0; p < want.size(); ++p) EXPECT_NEAR(got[p], want[p], 2e-6 * std::abs(want[p])) << "pair " << p;
  }
}

TEST(MoeRoutePairs, CudaDeviceIndexOpsGiveTheHostIndexBits) {
  REQUIRE_CUDA_DEVICE();
  constexpr int64_t kExperts = 5, kM = 38, kK = 64, kRows = 3, kTopK = 2;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  Tensor w = Tensor::zeros(DType::F32, {kExperts, kM, kK}), x = Tensor::zeros(DType::F32, {kRows, kK});
  for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = normal(rng);
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = normal(rng);
  const Tensor dw = to_device(w, Device::CUDA), dx = to_device(x, Device::CUDA);
  const std::vector<int32_t> rows = {0, 0, 1, 1, 2, 2}, experts = {1, 4, 0, 3, 2, 4};
  const std::vector<float> scales = {0.5f, 0.25f, 1.5f, 2.0f, 0.75f, 1.25f};
  Tensor host_ids = Tensor::zeros(DType::I32, {kRows * kTopK}),
         host_scales = Tensor::zeros(DType::F32, {kRows * kTopK});
  std::copy(experts.begin(), experts.end(), host_ids.data_as<int32_t>());
  std::copy(scales.begin(), scales.end(), host_scales.data_as<float>());
  const Tensor ids = to_device(host_ids, Device::CUDA), dscales = to_device(host_scales, Device::CUDA);
  Tensor y_host = zeros(DType::F32, {kRows * kTopK, kM}, Device::CUDA);
  Tensor y_device = zeros(DType::F32, {kRows * kTopK, kM}, Device::CUDA);
  expert_matmul(dx, rows, dw, experts, y_host);
  expert_matmul(dx, rows, dw, ids, y_device);
  scale_rows(y_host, scales);
  scale_rows(y_device, dscales);
  EXPECT_EQ(host_vector<float>(y_device), host_vector<float>(y_host));
}

}  // namespace
}  // namespace brioche::ops
