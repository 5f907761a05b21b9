// The int8-activation decode GEMV (backend/cuda/gemv_int8.cuh) against a
// double-precision reference of (dequantized w) · x, for every dtype it
// covers (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, MLX affine 4/8-bit in groups of
// 32, 64 and 128), n = 1..8 activation rows, odd
// m, k from 256 to 14,336 (Llama-3-8B's down_proj), and the GemvArgs fusions
// (Q/K/V parts in one launch, accumulate into y, SwiGLU with w_up).
//
// Tolerance. NMSE = Σ(y − ref)² / Σ ref². The kernel rounds each x to int8
// within its 32-value block (step dx = max|x|/127, error variance dx²/12).
// For Gaussian x, E[max² of 32 |N(0,1)|] ≈ 4.3, so the relative error variance
// per value is ≈ 4.3/127²/12 ≈ 2.2e-5, and the same holds for a dot product
// with independent weights: NMSE ≈ 2–3e-5 expected (the CPU backend
// quantizes activations the same way, see backend/cpu/quant_act.h). The
// weight side is exact (integer products, f32 scales once per 32 values).
// The x rows here have one block scaled by 50, which dominates y: for a
// single row the error is then that one block's 32 rounding errors, a
// heavy-tailed quantity (max|x| of a block up to ~3.5σ while its rms can be
// ~0.8σ): up to 1.65e-4 was measured (Q8_0, n = 1), and a host emulation of
// the same rounding on the same data gives the same value. So: each case
// NMSE < 4e-4, and the mean over a test's cases < 1e-4 (SwiGLU adds the
// errors of two products). A wrong scale, offset or lane mapping gives
// NMSE ≳ 1e-2.
// Shapes the int8 path does not take (Q4_0 with an odd block count) must stay
// on the f32 path, whose own bound is 1e-10.
// Without a GPU every test reports "skipped: no CUDA device".
#include <gtest/gtest.h>

#if BRIOCHE_CUDA

#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/quant_ref.h"
#include "backend/cuda/gemv_int8.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "require_cuda.h"

namespace brioche::cuda {
namespace {

constexpr double kInt8Tolerance = 4e-4;      // per case
constexpr double kInt8MeanTolerance = 1e-4;  // mean over a test's cases
constexpr float kSentinel = -4242.5f;
constexpr DType kInt8Types[] = {DType::Q8_0,         DType::Q4_0,        DType::Q4_1,        DType::Q4_K,
                                DType::Q5_K,         DType::Q6_K,        DType::AFFINE4_G32, DType::AFFINE4_G64,
                                DType::AFFINE4_G128, DType::AFFINE8_G32, DType::AFFINE8_G64, DType::AFFINE8_G128};

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

std::shared_ptr<void> upload(const void* host, size_t bytes) {
  std::shared_ptr<void> d = allocate(bytes);
  copy_to_device(d.get(), host, bytes);
  return d;
}

// A random weight [m, k] of `dtype`: its bytes and its dequantized values.
struct Weight {
  size_t row_bytes;
  std::vector<uint8_t> bytes;  // [m, row_bytes]
  std::vector<float> values;   // [m, k] dequantized
  std::shared_ptr<void> device;
};

Weight make_weight(DType dtype, int64_t m, int64_t k, uint32_t seed) {
  Weight w{row_bytes(dtype, k), {}, std::vector<float>(size_t(m * k)), nullptr};
  w.bytes.resize(w.row_bytes * size_t(m));
  const std::vector<float> src = gaussian(size_t(m * k), seed);
  for (int64_t r = 0; r < m; ++r) {
    cpu::quantize_row_ref(dtype, src.data() + r * k, w.bytes.data() + r * w.row_bytes, k);
    cpu::dequantize_row_ref(dtype, w.bytes.data() + r * w.row_bytes, w.values.data() + r * k, k);
  }
  w.device = upload(w.bytes.data(), w.bytes.size());
  return w;
}

// x [n, ldx] with a few zero blocks (their scale is 0) and one block of large
// values (a wide dynamic range across blocks).
std::vector<float> make_x(int64_t n, int64_t ldx, int64_t k, uint32_t seed) {
  std::vector<float> x = gaussian(size_t(n * ldx), seed);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < 32; ++i) x[r * ldx + (r * 64) % k + i] = 0.0f;
    for (int64_t i = 0; i < 32; ++i) x[r * ldx + (k - 32 - (r * 32) % k + k) % k + i] *= 50.0f;
  }
  return x;
}

// make_x's rows on the host (for the reference) and their copy on the device.
struct TestX {
  std::vector<float> host;
  std::shared_ptr<void> device;
  const float* data() const { return static_cast<const float*>(device.get()); }
};

TestX make_test_x(int64_t n, int64_t ldx, int64_t k, uint32_t seed) {
  TestX x{make_x(n, ldx, k, seed), nullptr};
  x.device = upload(x.host.data(), x.host.size() * 4);
  return x;
}

// ref[r, j] = Σ_e x[r, e] · w[j, e] in double.
std::vector<double> reference(const std::vector<float>& x, int64_t ldx, const Weight& w, int64_t n, int64_t m,
                              int64_t k) {
  std::vector<double> ref(size_t(n * m));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t e = 0; e < k; ++e) s += double(x[r * ldx + e]) * double(w.values[j * k + e]);
      ref[r * m + j] = s;
    }
  return ref;
}

// y on the device: [n, ldy] with sentinels in the padding columns.
struct DeviceY {
  int64_t n, m, ldy;
  std::shared_ptr<void> memory;
  float* data() const { return static_cast<float*>(memory.get()); }
};

DeviceY make_y(int64_t n, int64_t m, const std::vector<float>* initial = nullptr) {
  DeviceY y{n, m, m + 3, nullptr};
  std::vector<float> host(size_t(n * y.ldy), kSentinel);
  if (initial != nullptr)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < m; ++j) host[r * y.ldy + j] = (*initial)[r * m + j];
  y.memory = upload(host.data(), host.size() * 4);
  return y;
}

std::vector<float> download(const DeviceY& y) {
  std::vector<float> host(size_t(y.n * y.ldy));
  copy_to_host(host.data(), y.memory.get(), host.size() * 4);
  std::vector<float> out(size_t(y.n * y.m));
  for (int64_t r = 0; r < y.n; ++r) {
    for (int64_t j = 0; j < y.m; ++j) out[r * y.m + j] = host[r * y.ldy + j];
    for (int64_t j = y.m; j < y.ldy; ++j)
      EXPECT_EQ(host[r * y.ldy + j], kSentinel) << "padding of row " << r << " written";
  }
  return out;
}

double nmse(const std::vector<float>& y, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) {
      ADD_FAILURE() << "non-finite output " << y[i] << " at " << i;
      return INFINITY;
    }
    num += (double(y[i]) - ref[i]) * (double(y[i]) - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? num / den : num;
}

cpu::MatmulArgs args(const float* x, int64_t ldx, DType dtype, const Weight& w, const DeviceY& y, int64_t k) {
  return {.x = x,
          .ldx = ldx,
          .wtype = dtype,
          .w = w.device.get(),
          .w_row_bytes = w.row_bytes,
          .y = y.data(),
          .ldy = y.ldy,
          .n = y.n,
          .m = y.m,
          .k = k};
}

// Worst and mean NMSE per dtype, checked and printed at the end of each test.
struct Worst {
  double value[kNumDTypes] = {}, sum[kNumDTypes] = {};
  int count[kNumDTypes] = {};
  void add(DType t, double e) {
    value[int(t)] = std::max(value[int(t)], e);
    sum[int(t)] += e;
    ++count[int(t)];
  }
  void print(const char* what) const {
    for (DType t : kInt8Types) {
      if (count[int(t)] == 0) continue;  // not in this test
      const double mean = sum[int(t)] / count[int(t)];
      EXPECT_LT(mean, kInt8MeanTolerance) << what << " " << dtype_name(t) << " mean NMSE";
      std::printf("  %s %-5s NMSE mean %.2e worst %.2e\n", what, dtype_name(t).data(), mean, value[int(t)]);
    }
  }
};

// matmul_accumulate of x·wᵀ into a random residual [n, m]: NMSE against
// want (the reference of x·wᵀ) + residual.
double accumulate_nmse(const TestX& x, int64_t n, int64_t k, DType dtype, const Weight& w, int64_t m,
                       const std::vector<double>& want, uint32_t seed) {
  const std::vector<float> residual = gaussian(size_t(n * m), seed);
  const DeviceY acc = make_y(n, m, &residual);
  cuda::matmul_accumulate(args(x.data(), k, dtype, w, acc, k));
  std::vector<double> want_acc(want);
  for (size_t i = 0; i < want_acc.size(); ++i) want_acc[i] += residual[i];
  return nmse(download(acc), want_acc);
}

// matmul_swiglu of x through gate wg and up wu: NMSE against silu(g)·u, g
// and u the references of the two products.
double swiglu_nmse(const TestX& x, int64_t n, int64_t k, DType dtype, const Weight& wg, const Weight& wu, int64_t m,
                   const std::vector<double>& g, const std::vector<double>& u) {
  const DeviceY sw = make_y(n, m);
  const DeviceY up_scratch = make_y(n, m);  // written only by the n > 8 path
  cuda::matmul_swiglu(args(x.data(), k, dtype, wg, sw, k), args(x.data(), k, dtype, wu, up_scratch, k));
  std::vector<double> want(g.size());
  for (size_t i = 0; i < g.size(); ++i) want[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return nmse(download(sw), want);
}

// Q, K and V (weights w, rows ms) in one matmul_group launch: each part's NMSE.
std::array<double, 3> qkv_nmse(const TestX& x, int64_t n, int64_t k, DType dtype, const Weight (&w)[3],
                               const int64_t (&ms)[3]) {
  DeviceY ys[3] = {make_y(n, ms[0]), make_y(n, ms[1]), make_y(n, ms[2])};
  const cpu::MatmulArgs parts[3] = {args(x.data(), k, dtype, w[0], ys[0], k), args(x.data(), k, dtype, w[1], ys[1], k),
                                    args(x.data(), k, dtype, w[2], ys[2], k)};
  cuda::matmul_group(parts);
  std::array<double, 3> err{};
  for (int p = 0; p < 3; ++p) err[p] = nmse(download(ys[p]), reference(x.host, k, w[p], n, ms[p], k));
  return err;
}

TEST(CudaGemvInt8, EveryDtypeRowsOneToEight) {
  REQUIRE_CUDA_DEVICE();
  Worst worst;
  uint32_t seed = 1;
  for (DType dtype : kInt8Types) {
    for (auto [m, k] : {std::pair<int64_t, int64_t>{131, 256}, {37, 4096}, {19, 14336}}) {
      const Weight w = make_weight(dtype, m, k, seed++);
      for (int64_t n = 1; n <= 8; ++n) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " n=" << n << " m=" << m << " k=" << k);
        const int64_t ldx = k + 4 * (n % 3);  // strided x rows for some n
        const TestX x = make_test_x(n, ldx, k, seed++);
        const DeviceY y = make_y(n, m);
        cuda::matmul(args(x.data(), ldx, dtype, w, y, k));
        const double err = nmse(download(y), reference(x.host, ldx, w, n, m, k));
        EXPECT_LT(err, kInt8Tolerance);
        worst.add(dtype, err);
      }
    }
  }
  worst.print("plain");
}

TEST(CudaGemvInt8, AccumulateAndSwiglu) {
  REQUIRE_CUDA_DEVICE();
  Worst acc_worst, swiglu_worst;
  const int64_t m = 77, k = 4096;
  uint32_t seed = 500;
  for (DType dtype : kInt8Types) {
    const Weight wg = make_weight(dtype, m, k, seed++), wu = make_weight(dtype, m, k, seed++);
    for (int64_t n : {1, 2, 5, 8}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " n=" << n);
      const TestX x = make_test_x(n, k, k, seed++);
      const std::vector<double> g = reference(x.host, k, wg, n, m, k), u = reference(x.host, k, wu, n, m, k);

      const double e_acc = accumulate_nmse(x, n, k, dtype, wg, m, g, seed++);
      EXPECT_LT(e_acc, kInt8Tolerance) << "accumulate";
      acc_worst.add(dtype, e_acc);
      const double e_sw = swiglu_nmse(x, n, k, dtype, wg, wu, m, g, u);
      EXPECT_LT(e_sw, kInt8Tolerance) << "swiglu";
      swiglu_worst.add(dtype, e_sw);
    }
  }
  acc_worst.print("accumulate");
  swiglu_worst.print("swiglu");
}

TEST(CudaGemvInt8, QkvPartsInOneLaunch) {
  REQUIRE_CUDA_DEVICE();
  Worst worst;
  const int64_t k = 2048;
  const int64_t ms[3] = {97, 33, 33};  // Q, K, V of a GQA layer, odd sizes
  uint32_t seed = 900;
  for (DType dtype : kInt8Types) {
    Weight w[3] = {make_weight(dtype, ms[0], k, seed), make_weight(dtype, ms[1], k, seed + 1),
                   make_weight(dtype, ms[2], k, seed + 2)};
    seed += 3;
    for (int64_t n : {1, 3, 8}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " n=" << n);
      const std::array<double, 3> err = qkv_nmse(make_test_x(n, k, k, seed++), n, k, dtype, w, ms);
      for (int p = 0; p < 3; ++p) {
        EXPECT_LT(err[p], kInt8Tolerance) << "part " << p;
        worst.add(dtype, err[p]);
      }
    }
  }
  worst.print("qkv");
}

// Whether the launch of y = x·wᵀ (one x row, and w_up for SwiGLU) takes the
// streamed whole-row kernel (gemv_stream_rows.cu).
bool streams_rows(DType dtype, const Weight& w, int64_t m, int64_t k, const Weight* up = nullptr) {
  detail::GemvArgs a{.x = nullptr, .ldx = k, .n = 1, .k = k};
  a.parts[0] = {.w = w.device.get(), .w_row_bytes = w.row_bytes, .y = nullptr, .ldy = 0, .m = m};
  a.m = m;
  if (up != nullptr) a.w_up = up->device.get();
  return detail::gemv_stream_rows_takes(dtype, a);
}

// The streamed whole-row kernel (launches of at least 8 MB at one x row) for
// each of its types: 16, 32 and 64 threads a row (k = 4,096, 8,192,
// 14,336), a partial last tile, accumulate, SwiGLU, and Q/K/V parts whose
// boundaries fall inside tiles, against the same double reference as the
// warp kernels.
TEST(CudaGemvInt8, StreamedRowsEveryFusion) {
  REQUIRE_CUDA_DEVICE();
  Worst plain, acc_worst, swiglu_worst, qkv_worst;
  uint32_t seed = 1300;
  for (DType dtype :
       {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::AFFINE4_G32, DType::AFFINE4_G64,
        DType::AFFINE4_G128, DType::AFFINE8_G32, DType::AFFINE8_G64, DType::AFFINE8_G128}) {
    // Rows for a launch of `mb` MB (the kernel takes ≥ 8), plus `extra`.
    auto rows = [&](int64_t mb, int64_t k, int64_t extra) { return (mb << 20) / int64_t(row_bytes(dtype, k)) + extra; };
    for (int64_t k : {4096, 8192, 14336}) {
      const int64_t m = rows(8, k, 5);  // just over 8 MB, a partial last tile
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " m=" << m << " k=" << k);
      const Weight w = make_weight(dtype, m, k, seed++);
      ASSERT_TRUE(streams_rows(dtype, w, m, k));
      const TestX x = make_test_x(1, k, k, seed++);
      const std::vector<double> want = reference(x.host, k, w, 1, m, k);
      const DeviceY y = make_y(1, m);
      cuda::matmul(args(x.data(), k, dtype, w, y, k));
      const double err = nmse(download(y), want);
      EXPECT_LT(err, kInt8Tolerance);
      plain.add(dtype, err);

      const double e_acc = accumulate_nmse(x, 1, k, dtype, w, m, want, seed++);
      EXPECT_LT(e_acc, kInt8Tolerance) << "accumulate";
      acc_worst.add(dtype, e_acc);
    }
    {                                             // SwiGLU (k = 4,096)
      const int64_t k = 4096, m = rows(4, k, 3);  // gate and up: over 8 MB
      const Weight wg = make_weight(dtype, m, k, seed++), wu = make_weight(dtype, m, k, seed++);
      ASSERT_TRUE(streams_rows(dtype, wg, m, k, &wu)) << dtype_name(dtype);
      const TestX x = make_test_x(1, k, k, seed++);
      const std::vector<double> g = reference(x.host, k, wg, 1, m, k), u = reference(x.host, k, wu, 1, m, k);
      const double e_sw = swiglu_nmse(x, 1, k, dtype, wg, wu, m, g, u);
      EXPECT_LT(e_sw, kInt8Tolerance) << dtype_name(dtype) << " swiglu";
      swiglu_worst.add(dtype, e_sw);
    }
    {  // Q, K and V in one launch, part boundaries inside tiles
      const int64_t k = 4096, mq = rows(6, k, 3), mkv = mq / 4 + 1;
      const int64_t ms[3] = {mq, mkv, mkv};
      const Weight w[3] = {make_weight(dtype, ms[0], k, seed), make_weight(dtype, ms[1], k, seed + 1),
                           make_weight(dtype, ms[2], k, seed + 2)};
      seed += 3;
      const std::array<double, 3> err = qkv_nmse(make_test_x(1, k, k, seed++), 1, k, dtype, w, ms);
      for (int p = 0; p < 3; ++p) {
        EXPECT_LT(err[p], kInt8Tolerance) << dtype_name(dtype) << " part " << p;
        qkv_worst.add(dtype, err[p]);
      }
    }
  }
  plain.print("streamed");
  acc_worst.print("streamed accumulate");
  swiglu_worst.print("streamed swiglu");
  qkv_worst.print("streamed qkv");
}

// Q4_0/Q8_0 with an odd number of 32-blocks (k = 96): the int8 kernels' word
// loads would end 2 bytes past the row's last block, so these shapes
// must stay on the f32 kernels, exact to f32 rounding.
TEST(CudaGemvInt8, OddBlockCountsKeepTheF32Path) {
  REQUIRE_CUDA_DEVICE();
  const int64_t m = 29, k = 96;
  for (DType dtype : {DType::Q4_0, DType::Q8_0}) {
    const Weight w = make_weight(dtype, m, k, 77);
    for (int64_t n : {1, 6}) {
      const std::vector<float> x = gaussian(size_t(n * k), 78);
      const std::shared_ptr<void> dx = upload(x.data(), x.size() * 4);
      const DeviceY y = make_y(n, m);
      cuda::matmul(args(static_cast<const float*>(dx.get()), k, dtype, w, y, k));
      EXPECT_LT(nmse(download(y), reference(x, k, w, n, m, k)), 1e-10) << dtype_name(dtype) << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace brioche::cuda

#else

TEST(CudaGemvInt8, NotBuilt) { GTEST_SKIP() << "skipped: no CUDA device (built without BRIOCHE_CUDA)"; }

#endif
