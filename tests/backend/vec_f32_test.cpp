// Vector helpers of the CPU backend against the C library.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/swiglu.h"
#include "backend/cpu/vec_f32.h"

namespace brioche::backend::cpu {
namespace {

#if BRIOCHE_VEC_AVX2
// exp256 is used by silu (and where softmax-like sums need e^x): relative
// error within 1e-6 of std::exp over the whole clamped range, and the clamp
// keeps results finite and positive outside it.
TEST(VecF32, Exp256MatchesStdExp) {
  std::vector<float> xs;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) xs.push_back(x);
  for (float x : {0.0f, -0.0f, 1e-8f, -1e-8f, 0.5f, -0.5f, 1.0f, 10.0f, -10.0f}) xs.push_back(x);
  while (xs.size() % 8) xs.push_back(0.0f);
  for (size_t i = 0; i < xs.size(); i += 8) {
    alignas(32) float out[8];
    _mm256_store_ps(out, exp256(_mm256_loadu_ps(&xs[i])));
    for (int j = 0; j < 8; ++j) {
      const double want = std::exp(double(xs[i + j]));
      ASSERT_LE(std::fabs(out[j] - want), 1e-6 * want) << "exp(" << xs[i + j] << ")";
    }
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, exp256(_mm256_setr_ps(-1000.0f, -200.0f, -88.5f, 89.0f, 200.0f, 1000.0f, -INFINITY, INFINITY)));
  for (int j = 0; j < 8; ++j) {
    EXPECT_TRUE(std::isfinite(out[j])) << j;
    EXPECT_GT(out[j], 0.0f) << j;
  }
}
#endif

TEST(VecF32, SwigluMatchesScalarFormula) {
  const int64_t n_rows = 3, dim = 37;  // vector body and scalar tail
  std::vector<float> gate(size_t(n_rows * dim)), up(gate.size()), out(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) {
    gate[i] = -30.0f + 60.0f * float(i) / float(gate.size());
    up[i] = 0.5f + 0.01f * float(i);
  }
  swiglu({.gate = gate.data(),
          .up = up.data(),
          .out = out.data(),
          .n_rows = n_rows,
          .dim = dim,
          .gate_stride = dim,
          .up_stride = dim,
          .out_stride = dim});
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i], want = g / (1.0 + std::exp(-g)) * up[i];
    ASSERT_NEAR(out[i], want, 1e-6 * std::fabs(want) + 1e-30) << "element " << i;
  }
}

}  // namespace
}  // namespace brioche::backend::cpu
