// Op harness for the CUDA backend: every kernel against the CPU reference
// (backend/cpu, itself tested against double-precision and oracle goldens),
// with odd and strided shapes, sentinels around outputs, and NaN/Inf checks.
//
// Error measure: NMSE = Σ(y − ref)² / Σ ref² over the whole output.
// Tolerances (stated, not tuned per case):
//   * f32 arithmetic on both sides (norms, RoPE, SwiGLU, add, softmax, GEMV
//     against a double reference of the dequantized weight): NMSE < 1e-10
//   * GEMM through cuBLASLt in bf16 (n > 8): x and w rounded to bf16
//     (relative error 2^-9 each): NMSE < 1e-4
//   * the MLP above 8 rows (matmul_swiglu_down): x, gate, up and h rounded
//     to 16 bits (and quantized weights to bf16 tiles): NMSE < 4 × Σ u²/3
//     over those roundings (derived under "the MLP above 8 rows")
//   * GEMV (n ≤ 8) over Q8_0/Q4_0/Q4_1/Q4_K/Q5_K/Q6_K: x rounded to int8
//     per 32-value block (gemv_int8.cuh; expected NMSE ≈ 2e-5): NMSE < 1e-4
//   * attention with an f16 cache: both sides read the same f16 values: 1e-10;
//     f32 cache: 1e-10. Sequences of ≥ kPrefillMinRows rows with an f16 cache
//     go to the tensor-core prefill kernel, which also rounds q·scale and the
//     softmax weights p to f16 (relative error 2^-11 each, f32 accumulation):
//     NMSE < 2e-5 (measured 4e-8..5e-8). So do batches of ≥ 8 decode rows
//     (the tensor-core decode kernel, attention_decode_mma.h). Both must
//     also show that rounding (NMSE > 1e-12), or they did not run.
//   * embedding and dequantization: bit-exact decode, NMSE < 1e-12
// Without a GPU (or in the CPU build) every test reports
// "skipped: no CUDA device".
#include <gtest/gtest.h>

#if BRIOCHE_CUDA

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/add.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/embedding.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_ref.h"
#include "backend/cpu/rms_norm.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/softmax.h"
#include "backend/cpu/swiglu.h"
#include "backend/cuda/attention_decode_mma.h"
#include "backend/cuda/attention_decode_splits.h"
#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"
#include "core/half.h"
#include "require_cuda.h"

namespace brioche::cuda {
namespace {

constexpr float kSentinel = -12345.678f;  // written around outputs, must survive
constexpr int kPad = 64;                  // sentinel floats after each buffer

// A device copy of host data with kPad sentinel values after it.
struct DeviceBuffer {
  std::shared_ptr<void> memory;
  size_t bytes = 0;
  template <typename T>
  T* as() const {
    return static_cast<T*>(memory.get());
  }
};

template <typename T>
DeviceBuffer upload(const std::vector<T>& host) {
  DeviceBuffer b{allocate(host.size() * sizeof(T) + kPad * sizeof(float)), host.size() * sizeof(T)};
  copy_to_device(b.memory.get(), host.data(), b.bytes);
  std::vector<float> pad(kPad, kSentinel);
  copy_to_device(static_cast<char*>(b.memory.get()) + b.bytes, pad.data(), pad.size() * sizeof(float));
  return b;
}

template <typename T>
std::vector<T> download(const DeviceBuffer& b) {
  std::vector<T> out(b.bytes / sizeof(T));
  copy_to_host(out.data(), b.memory.get(), b.bytes);
  std::vector<float> pad(kPad);
  copy_to_host(pad.data(), static_cast<char*>(b.memory.get()) + b.bytes, pad.size() * sizeof(float));
  for (int i = 0; i < kPad; ++i) EXPECT_EQ(pad[i], kSentinel) << "sentinel " << i << " after the buffer overwritten";
  return out;
}

std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

// NMSE over the positions `take(i)` says are outputs; NaN/Inf fail.
template <typename A, typename B>
double nmse(const std::vector<A>& y, const std::vector<B>& ref) {
  EXPECT_EQ(y.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size() && i < ref.size(); ++i) {
    if (!std::isfinite(double(y[i]))) {
      ADD_FAILURE() << "non-finite output " << y[i] << " at " << i;
      return INFINITY;
    }
    double d = double(y[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return den > 0 ? num / den : num;
}

// ---------------------------------------------------------------- matmul

constexpr DType kAllWeightTypes[] = {
    DType::F32,         DType::F16,          DType::BF16,        DType::Q8_0,        DType::Q4_0,
    DType::Q4_1,        DType::Q4_K,         DType::Q5_K,        DType::Q6_K,        DType::AFFINE4_G32,
    DType::AFFINE4_G64, DType::AFFINE4_G128, DType::AFFINE8_G32, DType::AFFINE8_G64, DType::AFFINE8_G128,
};

struct MatmulCase {
  int64_t n, m, k;
  int64_t x_pad, y_pad;  // extra floats per row (strided views)
};

void check_matmul(DType wtype, const MatmulCase& c, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << dtype_name(wtype) << " n=" << c.n << " m=" << c.m << " k=" << c.k
                                  << " x_pad=" << c.x_pad << " y_pad=" << c.y_pad);
  const size_t rb = row_bytes(wtype, c.k);
  std::vector<uint8_t> w(rb * size_t(c.m));
  std::vector<float> wf(size_t(c.m * c.k));
  std::vector<float> src = gaussian(size_t(c.m * c.k), seed);
  for (int64_t r = 0; r < c.m; ++r) {
    cpu::quantize_row_ref(wtype, src.data() + r * c.k, w.data() + r * rb, c.k);
    cpu::dequantize_row_ref(wtype, w.data() + r * rb, wf.data() + r * c.k, c.k);
  }
  const int64_t ldx = c.k + c.x_pad, ldy = c.m + c.y_pad;
  std::vector<float> x = gaussian(size_t(c.n * ldx), seed + 1);
  std::vector<double> ref(size_t(c.n * c.m));
  for (int64_t i = 0; i < c.n; ++i)
    for (int64_t j = 0; j < c.m; ++j) {
      double s = 0;
      for (int64_t e = 0; e < c.k; ++e) s += double(x[i * ldx + e]) * double(wf[j * c.k + e]);
      ref[i * c.m + j] = s;
    }
  // The CPU op itself, as the engine's reference path.
  std::vector<float> y_cpu(size_t(c.n * c.m));
  cpu::matmul({.x = x.data(),
               .ldx = ldx,
               .wtype = wtype,
               .w = w.data(),
               .w_row_bytes = rb,
               .y = y_cpu.data(),
               .ldy = c.m,
               .n = c.n,
               .m = c.m,
               .k = c.k});

  DeviceBuffer dw = upload(w), dx = upload(x);
  DeviceBuffer dy = upload(std::vector<float>(size_t(c.n * ldy), kSentinel));
  matmul({.x = dx.as<float>(),
          .ldx = ldx,
          .wtype = wtype,
          .w = dw.as<void>(),
          .w_row_bytes = rb,
          .y = dy.as<float>(),
          .ldy = ldy,
          .n = c.n,
          .m = c.m,
          .k = c.k});
  std::vector<float> y_all = download<float>(dy);
  std::vector<float> y(size_t(c.n * c.m));
  for (int64_t i = 0; i < c.n; ++i) {
    for (int64_t j = 0; j < c.m; ++j) y[i * c.m + j] = y_all[i * ldy + j];
    for (int64_t j = c.m; j < ldy; ++j) EXPECT_EQ(y_all[i * ldy + j], kSentinel) << "row padding written";
  }
  const bool gemm = c.n > 8;
  // GEMV over every quantized type (every k here qualifies) runs on int8
  // activations (backend/cuda/gemv_int8.cuh): x rounded to int8 per 32-value
  // block, NMSE ≈ 2e-5 (tests/backend/cuda_gemv_int8_test.cpp).
  const bool int8_x = !gemm && dtype_info(wtype).quantized;
  EXPECT_LT(nmse(y, ref), gemm || int8_x ? 1e-4 : 1e-10);
  EXPECT_LT(nmse(y, y_cpu), 1e-3) << "against cpu::matmul";
}

TEST(CudaMatmul, EveryDtypeGemvAndGemm) {
  REQUIRE_CUDA_DEVICE();
  uint32_t seed = 1;
  for (DType t : kAllWeightTypes) {
    for (MatmulCase c :
         {MatmulCase{1, 37, 512, 0, 0}, MatmulCase{3, 64, 256, 4, 3}, MatmulCase{8, 19, 768, 0, 1},
          MatmulCase{5, 130, 1024, 8, 0}, MatmulCase{33, 70, 512, 0, 5}, MatmulCase{130, 300, 256, 4, 0}}) {
      check_matmul(t, c, seed++);
    }
  }
}

// Above 512 rows a GEMM's timed algorithm serves every row count up to the
// next power of two (backend/cuda/lt_gemm.cu): 1,024 rows are timed, 700,
// 513 and 1,000 rows take that choice (after cublasLtMatmulAlgoCheck), 1,025
// rows open the next bucket. What this checks is that a choice reused at
// another row count still gives the right product (bf16, and Q4_0's bf16
// tiles, whose GEMMs may share bf16's keys); it does not observe which
// calls were timed.
TEST(CudaMatmul, TimedAlgorithmServesItsRowBucket) {
  REQUIRE_CUDA_DEVICE();
  uint32_t seed = 200;
  for (DType t : {DType::BF16, DType::Q4_0})
    for (int64_t n : {1024, 700, 513, 1000, 1025}) check_matmul(t, {n, 96, 256, 0, 0}, seed++);
}

TEST(CudaMatmul, DenseOddInnerSizes) {
  REQUIRE_CUDA_DEVICE();
  uint32_t seed = 100;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (MatmulCase c : {MatmulCase{1, 5, 40, 0, 0}, MatmulCase{2, 9, 36, 1, 2}, MatmulCase{1, 33, 576, 0, 0},
                         MatmulCase{20, 17, 72, 0, 0}}) {
      check_matmul(t, c, seed++);
    }
  }
}

// ---------------------------------------------------------------- the MLP above 8 rows
// matmul_swiglu_down for n > 8 with 16-bit or quantized weights: the gate and
// up GEMMs write 16-bit outputs (bf16; f16 for f16 weights) side by side into
// one scratch (one stacked GEMM when the weights lie back to back and n ≤ 512,
// else two GEMMs writing their columns), the SwiGLU kernel reads them and
// writes the 16-bit rows the down GEMM reads, and the down GEMM adds to the
// residual. Against a double reference of the dequantized weights.
//
// Tolerance. Rounding to a 16-bit type of unit roundoff u (bf16 2^-8, f16
// 2^-11) is a relative error of at most ±u, mean square at most u²/3; the
// path's roundings are independent, so their mean squares add up in the NMSE
// of the MLP's output (its sums are f32: 2^-24, nothing next to these). At
// the gate/up GEMMs' type: x (into gate's sums and into up's: two errors),
// gate and up themselves (the rounding of the GEMMs' 16-bit outputs: the one
// this path adds to the f32 route), and for quantized weights the bf16 tiles
// of gate and up; at the down GEMM's type: h, and a quantized down's tile.
// Bound: 4 × Σ u²/3 (4: SiLU's gain on gate's relative error, 1 + g·σ(−g),
// up to 1.3 where silu(g) is not small, and a finite sample's spread). bf16:
// 4 × 5 × 5.1e-6 = 1.0e-4; Q4_0: 4 × 8 × 5.1e-6 = 1.6e-4; f16: 1.6e-6. A
// simulation of these roundings at 64 × 256 × 128 gives 1.5e-5, 2.5e-5 and
// 2.4e-7 (the f32 route without the gate/up rounding: 8.6e-6, 1.7e-5, 1.3e-7).

struct MlpCase {
  DType gate_type, down_type;  // gate's and up's weights; down's
  int64_t n, k, m;             // rows, hidden size (gate/up's k, down's m), intermediate size
  bool stacked;                // gate and up weights back to back in one allocation
  bool accumulate = true;      // y += MLP (the residual add), else y = MLP (a tensor-parallel partial sum)
};

// The NMSE bound derived above.
double mlp_nmse_bound(DType gate_type, DType down_type) {
  auto mean_square = [](DType t) {
    const double u = std::ldexp(1.0, t == DType::F16 ? -11 : -8);
    return u * u / 3;
  };
  const int gate_side = 4 + (dtype_info(gate_type).quantized ? 2 : 0);
  const int down_side = 1 + (dtype_info(down_type).quantized ? 1 : 0);
  return 4 * (gate_side * mean_square(gate_type) + down_side * mean_square(down_type));
}

// Rows [m, k] of `type` from Gaussian values of deviation `scale`, and their
// exact decode in f32.
struct QuantizedRows {
  std::vector<uint8_t> bytes;
  std::vector<float> decoded;
};
QuantizedRows quantized_rows(DType type, int64_t m, int64_t k, uint32_t seed, float scale) {
  const size_t rb = row_bytes(type, k);
  QuantizedRows q{std::vector<uint8_t>(rb * size_t(m)), std::vector<float>(size_t(m * k))};
  const std::vector<float> src = gaussian(size_t(m * k), seed, scale);
  for (int64_t r = 0; r < m; ++r) {
    cpu::quantize_row_ref(type, src.data() + r * k, q.bytes.data() + r * rb, k);
    cpu::dequantize_row_ref(type, q.bytes.data() + r * rb, q.decoded.data() + r * k, k);
  }
  return q;
}

void check_swiglu_down(const MlpCase& c, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "gate/up " << dtype_name(c.gate_type) << ", down " << dtype_name(c.down_type)
                                  << " n=" << c.n << " k=" << c.k << " m=" << c.m
                                  << (c.stacked ? " stacked" : " separate") << (c.accumulate ? " y +=" : " y ="));
  // gate and up: rows [0, m) and [m, 2m) of one [2m, k] weight.
  const QuantizedRows gate_up = quantized_rows(c.gate_type, 2 * c.m, c.k, seed, 1.0f / std::sqrt(float(c.k)));
  const QuantizedRows down = quantized_rows(c.down_type, c.k, c.m, seed + 1, 1.0f / std::sqrt(float(c.m)));
  const size_t rb = row_bytes(c.gate_type, c.k), rb_down = row_bytes(c.down_type, c.m);
  const int64_t ldx = c.k + 4, ldy = c.k + 3;
  const std::vector<float> x = gaussian(size_t(c.n * ldx), seed + 2);
  const std::vector<float> residual = gaussian(size_t(c.n * ldy), seed + 3);

  // mlp = (silu(x·gateᵀ) ⊙ (x·upᵀ))·downᵀ in double.
  std::vector<double> mlp(size_t(c.n * c.k));
  std::vector<double> h(size_t(c.m));
  for (int64_t i = 0; i < c.n; ++i) {
    for (int64_t j = 0; j < c.m; ++j) {
      double g = 0, u = 0;
      for (int64_t e = 0; e < c.k; ++e) {
        g += double(x[i * ldx + e]) * gate_up.decoded[j * c.k + e];
        u += double(x[i * ldx + e]) * gate_up.decoded[(c.m + j) * c.k + e];
      }
      h[j] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int64_t o = 0; o < c.k; ++o) {
      double s = 0;
      for (int64_t j = 0; j < c.m; ++j) s += h[j] * down.decoded[o * c.m + j];
      mlp[i * c.k + o] = s;
    }
  }

  DeviceBuffer d_gate_up = upload(gate_up.bytes), d_down = upload(down.bytes), dx = upload(x);
  // Separate weights: copies of the two halves in allocations of their own.
  const auto half = [&](int part) {
    return upload(std::vector<uint8_t>(gate_up.bytes.begin() + ptrdiff_t(part * c.m * rb),
                                       gate_up.bytes.begin() + ptrdiff_t((part + 1) * c.m * rb)));
  };
  DeviceBuffer d_gate = c.stacked ? DeviceBuffer{} : half(0), d_up = c.stacked ? DeviceBuffer{} : half(1);
  const char* w_gate = c.stacked ? d_gate_up.as<char>() : d_gate.as<char>();
  const char* w_up = c.stacked ? d_gate_up.as<char>() + c.m * rb : d_up.as<char>();
  const std::vector<float> nan(size_t(c.n * c.m), std::numeric_limits<float>::quiet_NaN());
  DeviceBuffer gate_y = upload(nan), up_y = upload(nan), dy = upload(residual);
  const cpu::MatmulArgs gate{.x = dx.as<float>(),
                             .ldx = ldx,
                             .wtype = c.gate_type,
                             .w = w_gate,
                             .w_row_bytes = rb,
                             .y = gate_y.as<float>(),
                             .ldy = c.m,
                             .n = c.n,
                             .m = c.m,
                             .k = c.k};
  cpu::MatmulArgs up = gate;
  up.w = w_up;
  up.y = up_y.as<float>();
  const cpu::MatmulArgs down_args{.x = gate_y.as<float>(),
                                  .ldx = c.m,
                                  .wtype = c.down_type,
                                  .w = d_down.as<void>(),
                                  .w_row_bytes = rb_down,
                                  .y = dy.as<float>(),
                                  .ldy = ldy,
                                  .n = c.n,
                                  .m = c.k,
                                  .k = c.m};
  matmul_swiglu_down(gate, up, down_args, {.accumulate = c.accumulate});

  const std::vector<float> y = download<float>(dy);
  std::vector<float> got(size_t(c.n * c.k));
  for (int64_t i = 0; i < c.n; ++i) {
    for (int64_t o = 0; o < c.k; ++o) got[i * c.k + o] = y[i * ldy + o] - (c.accumulate ? residual[i * ldy + o] : 0);
    for (int64_t o = c.k; o < ldy; ++o) EXPECT_EQ(y[i * ldy + o], residual[i * ldy + o]) << "row padding written";
  }
  EXPECT_LT(nmse(got, mlp), mlp_nmse_bound(c.gate_type, c.down_type));
  // The 16-bit path (above 8 rows) leaves the f32 gate and up outputs
  // unwritten; the GEMVs' path writes gate.y, which down reads.
  if (c.n <= 8) return;
  for (const DeviceBuffer* b : {&gate_y, &up_y}) {
    const std::vector<float> v = download<float>(*b);
    EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float f) { return std::isnan(f); }))
        << (b == &gate_y ? "gate.y" : "up.y") << " written";
  }
}

TEST(CudaMlp, SwigluDownWith16BitGateUpMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  uint32_t seed = 200;
  // One stacked GEMM (≤ 512 rows, weights back to back) and two GEMMs (separate
  // weights, or 520 rows), for bf16, f16 and Q4_0 weights.
  for (DType t : {DType::BF16, DType::F16, DType::Q4_0}) {
    for (MlpCase c :
         {MlpCase{t, t, 12, 256, 128, true}, MlpCase{t, t, 64, 256, 128, false}, MlpCase{t, t, 520, 256, 128, true}}) {
      check_swiglu_down(c, seed++);
    }
  }
  // Intermediate sizes not a multiple of 8 (the scalar SwiGLU kernel; up's
  // columns start at a 2-byte aligned address), with gate/up and down of
  // either 16-bit type (the SwiGLU kernel's four type pairs).
  for (MlpCase c :
       {MlpCase{DType::BF16, DType::BF16, 20, 256, 100, true}, MlpCase{DType::F16, DType::F16, 530, 256, 45, true},
        MlpCase{DType::F16, DType::BF16, 33, 256, 45, false}, MlpCase{DType::BF16, DType::F16, 33, 256, 128, true},
        MlpCase{DType::Q8_0, DType::F16, 520, 256, 96, false}}) {
    check_swiglu_down(c, seed++);
  }
  // y written, not added to (a tensor-parallel rank's MLP): the GEMMs' path
  // and the GEMVs' (≤ 8 rows, whose error is far inside the bound).
  for (MlpCase c : {MlpCase{DType::BF16, DType::BF16, 520, 256, 128, true, false},
                    MlpCase{DType::Q4_0, DType::Q4_0, 64, 256, 128, false, false},
                    MlpCase{DType::BF16, DType::BF16, 4, 256, 128, true, false}}) {
    check_swiglu_down(c, seed++);
  }
}

// ---------------------------------------------------------------- row ops

TEST(CudaRowOps, RmsNormAddSwigluSoftmaxStrided) {
  REQUIRE_CUDA_DEVICE();
  for (auto [rows, dim, pad] : {std::tuple{1, 576, 0}, std::tuple{7, 4096, 3}, std::tuple{33, 97, 5}}) {
    SCOPED_TRACE(testing::Message() << rows << "x" << dim << " pad " << pad);
    const int64_t ld = dim + pad;
    std::vector<float> x = gaussian(size_t(rows * ld), 7), b = gaussian(size_t(rows * ld), 8),
                       w = gaussian(size_t(dim), 9, 0.5f);
    DeviceBuffer dx = upload(x), db = upload(b), dw = upload(w);
    // rms_norm
    {
      std::vector<float> ref(size_t(rows * ld), 0.0f);
      backend::cpu::rms_norm({.x = x.data(),
                              .weight = w.data(),
                              .out = ref.data(),
                              .n_rows = rows,
                              .dim = dim,
                              .x_stride = ld,
                              .out_stride = ld,
                              .eps = 1e-5f});
      DeviceBuffer dy = upload(std::vector<float>(size_t(rows * ld), 0.0f));
      rms_norm({.x = dx.as<float>(),
                .weight = dw.as<float>(),
                .out = dy.as<float>(),
                .n_rows = rows,
                .dim = dim,
                .x_stride = ld,
                .out_stride = ld,
                .eps = 1e-5f});
      EXPECT_LT(nmse(download<float>(dy), ref), 1e-10) << "rms_norm";
    }
    // add and add_bias
    {
      std::vector<float> ref(size_t(rows * ld), 0.0f);
      backend::cpu::add({.a = x.data(),
                         .b = b.data(),
                         .out = ref.data(),
                         .n_rows = rows,
                         .dim = dim,
                         .a_stride = ld,
                         .b_stride = ld,
                         .out_stride = ld});
      DeviceBuffer dy = upload(std::vector<float>(size_t(rows * ld), 0.0f));
      add({.a = dx.as<float>(),
           .b = db.as<float>(),
           .out = dy.as<float>(),
           .n_rows = rows,
           .dim = dim,
           .a_stride = ld,
           .b_stride = ld,
           .out_stride = ld});
      EXPECT_LT(nmse(download<float>(dy), ref), 1e-12) << "add";
      std::vector<float> xb = x;
      backend::cpu::add_bias(xb.data(), w.data(), rows, dim, ld);
      DeviceBuffer dxb = upload(x);
      add_bias(dxb.as<float>(), dw.as<float>(), rows, dim, ld);
      EXPECT_LT(nmse(download<float>(dxb), xb), 1e-12) << "add_bias";
    }
    // swiglu, in place on gate as the model uses it
    {
      std::vector<float> ref = x;
      backend::cpu::swiglu({.gate = x.data(),
                            .up = b.data(),
                            .out = ref.data(),
                            .n_rows = rows,
                            .dim = dim,
                            .gate_stride = ld,
                            .up_stride = ld,
                            .out_stride = ld});
      DeviceBuffer dg = upload(x);
      swiglu({.gate = dg.as<float>(),
              .up = db.as<float>(),
              .out = dg.as<float>(),
              .n_rows = rows,
              .dim = dim,
              .gate_stride = ld,
              .up_stride = ld,
              .out_stride = ld});
      EXPECT_LT(nmse(download<float>(dg), ref), 1e-10) << "swiglu";
    }
    // softmax, with one fully masked row
    {
      std::vector<float> s = x;
      for (int64_t i = 0; i < dim; ++i) s[i] = -std::numeric_limits<float>::infinity();
      std::vector<float> ref = s;
      backend::cpu::softmax(ref.data(), rows, dim, ld);
      DeviceBuffer ds = upload(s);
      softmax(ds.as<float>(), rows, dim, ld);
      EXPECT_LT(nmse(download<float>(ds), ref), 1e-10) << "softmax";
    }
  }
}

// SwiGLU of 16-bit gate and up rows (GEMM outputs) into 16-bit rows, every
// pair of input and output types, on the vector kernel (8 values per 16-byte
// load: widths and strides multiples of 8) and the scalar one (others).
// Against silu(g)·u in double of the same 16-bit inputs: one rounding of the
// output, mean square relative error at most u²/3 (u = 2^-8 for bf16, 2^-11
// for f16; __expf's few ulp of f32 are nothing next to it): NMSE < 2u²/3.
TEST(CudaRowOps, Swiglu16BitInputsEveryTypePair) {
  REQUIRE_CUDA_DEVICE();
  for (auto [rows, dim, pad] :
       {std::tuple{5, 64, 0}, std::tuple{33, 96, 8}, std::tuple{7, 45, 3}, std::tuple{3, 100, 0}}) {
    for (bool f16_in : {false, true}) {
      for (bool f16_out : {false, true}) {
        SCOPED_TRACE(testing::Message() << rows << "x" << dim << " pad " << pad << (f16_in ? " f16" : " bf16") << " to "
                                        << (f16_out ? "f16" : "bf16"));
        const int64_t ld = dim + pad;
        auto to_16 = [&](float f) { return f16_in ? f32_to_f16(f) : f32_to_bf16(f); };
        auto from_16 = [](uint16_t h, bool f16) { return f16 ? brioche::f16_to_f32(h) : brioche::bf16_to_f32(h); };
        const std::vector<float> g = gaussian(size_t(rows * ld), 11, 3.0f), u = gaussian(size_t(rows * ld), 12);
        std::vector<uint16_t> g16(g.size()), u16(u.size());
        std::transform(g.begin(), g.end(), g16.begin(), to_16);
        std::transform(u.begin(), u.end(), u16.begin(), to_16);
        std::vector<double> ref(size_t(rows * dim));
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < dim; ++c) {
            const double gv = from_16(g16[r * ld + c], f16_in), uv = from_16(u16[r * ld + c], f16_in);
            ref[r * dim + c] = gv / (1.0 + std::exp(-gv)) * uv;
          }
        }
        DeviceBuffer dg = upload(g16), du = upload(u16), dout = upload(std::vector<uint16_t>(ref.size(), 0));
        swiglu_16bit_to_16bit({.gate = dg.as<void>(),
                               .up = du.as<void>(),
                               .gate_stride = ld,
                               .up_stride = ld,
                               .n_rows = rows,
                               .dim = dim,
                               .f16 = f16_in},
                              dout.as<void>(), f16_out);
        const std::vector<uint16_t> out16 = download<uint16_t>(dout);
        std::vector<float> out(out16.size());
        for (size_t i = 0; i < out16.size(); ++i) out[i] = from_16(out16[i], f16_out);
        const double unit = std::ldexp(1.0, f16_out ? -11 : -8);
        EXPECT_LT(nmse(out, ref), 2 * unit * unit / 3);
      }
    }
  }
}

TEST(CudaRowOps, RopeBothPairingsLongPositions) {
  REQUIRE_CUDA_DEVICE();
  for (bool interleaved : {true, false}) {
    for (auto [rows, heads, head_dim] : {std::tuple{5, 3, 64}, std::tuple{2, 32, 128}, std::tuple{9, 2, 10}}) {
      std::vector<float> inv_freq(size_t(head_dim / 2));
      for (int i = 0; i < head_dim / 2; ++i) inv_freq[i] = std::pow(500000.0f, -2.0f * i / head_dim) / (i % 3 + 1);
      std::vector<int32_t> pos(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) pos[r] = r * 3779 % 131072;  // long-context positions
      const int64_t ld = int64_t(heads) * head_dim + 2;
      std::vector<float> x = gaussian(size_t(rows * ld), 11), ref = x;
      backend::cpu::rope({.x = ref.data(),
                          .positions = pos.data(),
                          .inv_freq = inv_freq.data(),
                          .n_rows = rows,
                          .x_stride = ld,
                          .n_heads = heads,
                          .head_dim = head_dim,
                          .interleaved = interleaved});
      DeviceBuffer dx = upload(x);
      rope({.x = dx.as<float>(),
            .positions = pos.data(),
            .inv_freq = inv_freq.data(),
            .n_rows = rows,
            .x_stride = ld,
            .n_heads = heads,
            .head_dim = head_dim,
            .interleaved = interleaved});
      // sincosf on the device vs libm at angles up to ~1e5 rad: both f32 rounding.
      EXPECT_LT(nmse(download<float>(dx), ref), 1e-9)
          << (interleaved ? "interleaved" : "neox") << " heads " << heads << " dim " << head_dim;
    }
  }
}

TEST(CudaEmbedding, EveryDtypeMatchesCpuDecode) {
  REQUIRE_CUDA_DEVICE();
  const int64_t vocab = 50, hidden = 512;
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23};
  for (DType t : kAllWeightTypes) {
    const size_t rb = row_bytes(t, hidden);
    std::vector<uint8_t> table(rb * vocab);
    std::vector<float> src = gaussian(size_t(vocab * hidden), 21);
    for (int64_t r = 0; r < vocab; ++r)
      cpu::quantize_row_ref(t, src.data() + r * hidden, table.data() + r * rb, hidden);
    std::vector<float> ref(ids.size() * hidden);
    cpu::embedding({.dtype = t,
                    .table = table.data(),
                    .row_bytes = rb,
                    .vocab = vocab,
                    .hidden = hidden,
                    .ids = ids.data(),
                    .n_ids = int64_t(ids.size()),
                    .out = ref.data(),
                    .ldo = hidden});
    DeviceBuffer dt = upload(table), dy = upload(std::vector<float>(ids.size() * hidden, 0.0f));
    embedding({.dtype = t,
               .table = dt.as<void>(),
               .row_bytes = rb,
               .vocab = vocab,
               .hidden = hidden,
               .ids = ids.data(),
               .n_ids = int64_t(ids.size()),
               .out = dy.as<float>(),
               .ldo = hidden});
    EXPECT_LT(nmse(download<float>(dy), ref), 1e-12) << dtype_name(t);
  }
  const std::vector<int32_t> bad = {3, 50};
  std::vector<float> table(size_t(vocab * hidden));
  DeviceBuffer dt = upload(table), dy = upload(std::vector<float>(2 * hidden));
  EXPECT_THROW(embedding({.dtype = DType::F32,
                          .table = dt.as<void>(),
                          .row_bytes = size_t(hidden) * 4,
                          .vocab = vocab,
                          .hidden = hidden,
                          .ids = bad.data(),
                          .n_ids = 2,
                          .out = dy.as<float>(),
                          .ldo = hidden}),
               Error);
}

TEST(CudaArgmax, FirstMaximumPerRow) {
  REQUIRE_CUDA_DEVICE();
  const int64_t rows = 4, n = 128256;
  std::vector<float> logits = gaussian(size_t(rows * n), 31);
  logits[5] = 100.0f;                                              // row 0: single max
  logits[n + 9] = logits[n + 77777] = 50.0f;                       // row 1: tie -> first
  logits[3 * n + n - 1] = 99.0f;                                   // row 3: last element
  logits[2 * n + 4000] = std::numeric_limits<float>::quiet_NaN();  // row 2: NaN never wins
  DeviceBuffer d = upload(logits);
  std::vector<int32_t> ids(rows);
  argmax_rows(d.as<float>(), rows, n, n, ids);
  auto first_max = [&](int64_t r) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i)
      if (!std::isnan(logits[r * n + i]) && (best < 0 || logits[r * n + i] > logits[r * n + best])) best = i;
    return int32_t(best);
  };
  EXPECT_EQ(ids[0], 5);
  EXPECT_EQ(ids[1], 9);  // ties in different chunks: the first
  EXPECT_EQ(ids[2], first_max(2));
  EXPECT_EQ(ids[3], n - 1);
  // Ties inside a chunk, rows shorter than a chunk, a row stride, all −inf.
  const int64_t short_n = 1000, short_stride = 1024;
  std::vector<float> short_rows(size_t(3 * short_stride), -1.0f);
  short_rows[700] = short_rows[300] = 2.0f;
  short_rows[short_stride + 999] = 1.0f;
  for (int64_t i = 0; i < short_n; ++i) short_rows[2 * short_stride + i] = -std::numeric_limits<float>::infinity();
  DeviceBuffer ds = upload(short_rows);
  std::vector<int32_t> short_ids(3);
  argmax_rows(ds.as<float>(), 3, short_n, short_stride, short_ids);
  EXPECT_EQ(short_ids, (std::vector<int32_t>{300, 999, 0}));
}

// ---------------------------------------------------------------- attention

struct AttentionCase {
  int n_heads, n_kv_heads, head_dim;
  bool f16;
  int sliding_window;
  std::vector<std::pair<int, int>> sequences;  // (n_past, n_rows)
};

// Returns the NMSE of the CUDA output against backend::cpu::paged_attention.
double check_attention(const AttentionCase& c, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "heads " << c.n_heads << "/" << c.n_kv_heads << " d " << c.head_dim
                                  << (c.f16 ? " f16" : " f32") << " window " << c.sliding_window);
  const int block_size = 16, kv_dim = c.n_kv_heads * c.head_dim, q_dim = c.n_heads * c.head_dim;
  // Block tables: sequence s owns blocks in a shuffled order (a permutation:
  // two table entries naming one block would make the writes race).
  std::vector<std::vector<int32_t>> tables;
  int n_blocks = 0, n_rows = 0;
  std::mt19937 shuffle_rng(seed);
  for (auto [past, rows] : c.sequences) {
    int need = (past + rows + block_size - 1) / block_size;
    std::vector<int32_t> t;
    for (int b = 0; b < need; ++b) t.push_back(n_blocks + b);
    std::shuffle(t.begin(), t.end(), shuffle_rng);
    tables.push_back(t);
    n_blocks += need;
    n_rows += rows;
  }
  n_rows += 1;  // a trailing row no sequence covers: its output must stay untouched
  std::vector<backend::cpu::KvSequence> seqs;
  int row = 0;
  for (size_t s = 0; s < c.sequences.size(); ++s) {
    seqs.push_back({row, c.sequences[s].second, c.sequences[s].first, tables[s].data(), int32_t(tables[s].size())});
    row += c.sequences[s].second;
  }
  const size_t elem = c.f16 ? 2 : 4;
  const size_t cache_elems = size_t(n_blocks) * block_size * kv_dim;
  // The cache holds random history; store_kv then writes the batch's rows.
  std::vector<float> hist = gaussian(2 * cache_elems, seed);
  std::vector<uint8_t> k_cache(cache_elems * elem), v_cache(cache_elems * elem);
  for (size_t i = 0; i < cache_elems; ++i) {
    if (c.f16) {
      reinterpret_cast<uint16_t*>(k_cache.data())[i] = f32_to_f16(hist[i]);
      reinterpret_cast<uint16_t*>(v_cache.data())[i] = f32_to_f16(hist[cache_elems + i]);
    } else {
      reinterpret_cast<float*>(k_cache.data())[i] = hist[i];
      reinterpret_cast<float*>(v_cache.data())[i] = hist[cache_elems + i];
    }
  }
  std::vector<float> k = gaussian(size_t(n_rows) * kv_dim, seed + 1), v = gaussian(size_t(n_rows) * kv_dim, seed + 2);
  std::vector<float> q = gaussian(size_t(n_rows) * q_dim, seed + 3);
  DeviceBuffer dk = upload(k), dv = upload(v), dq = upload(q), dkc = upload(k_cache), dvc = upload(v_cache);
  DeviceBuffer dout = upload(std::vector<float>(size_t(n_rows) * q_dim, kSentinel));
  std::vector<float> out(size_t(n_rows) * q_dim, kSentinel);

  backend::cpu::KvCacheLayer host_cache{k_cache.data(), v_cache.data(), c.f16, n_blocks, block_size};
  backend::cpu::KvCacheLayer dev_cache{dkc.as<void>(), dvc.as<void>(), c.f16, n_blocks, block_size};
  backend::cpu::store_kv({.k = k.data(),
                          .v = v.data(),
                          .k_stride = kv_dim,
                          .v_stride = kv_dim,
                          .sequences = seqs.data(),
                          .n_sequences = int(seqs.size()),
                          .kv_dim = kv_dim,
                          .cache = host_cache});
  store_kv({.k = dk.as<float>(),
            .v = dv.as<float>(),
            .k_stride = kv_dim,
            .v_stride = kv_dim,
            .sequences = seqs.data(),
            .n_sequences = int(seqs.size()),
            .kv_dim = kv_dim,
            .cache = dev_cache});
  const float scale = 1.0f / std::sqrt(float(c.head_dim));
  backend::cpu::paged_attention({.q = q.data(),
                                 .out = out.data(),
                                 .q_stride = q_dim,
                                 .out_stride = q_dim,
                                 .sequences = seqs.data(),
                                 .n_sequences = int(seqs.size()),
                                 .n_heads = c.n_heads,
                                 .n_kv_heads = c.n_kv_heads,
                                 .head_dim = c.head_dim,
                                 .scale = scale,
                                 .sliding_window = c.sliding_window,
                                 .cache = host_cache});
  paged_attention({.q = dq.as<float>(),
                   .out = dout.as<float>(),
                   .q_stride = q_dim,
                   .out_stride = q_dim,
                   .sequences = seqs.data(),
                   .n_sequences = int(seqs.size()),
                   .n_heads = c.n_heads,
                   .n_kv_heads = c.n_kv_heads,
                   .head_dim = c.head_dim,
                   .scale = scale,
                   .sliding_window = c.sliding_window,
                   .cache = dev_cache});
  // The caches must agree byte for byte (same f16 rounding).
  std::vector<uint8_t> kc = download<uint8_t>(dkc), vc = download<uint8_t>(dvc);
  EXPECT_TRUE(kc == k_cache) << "K cache differs after store_kv";
  EXPECT_TRUE(vc == v_cache) << "V cache differs after store_kv";
  std::vector<float> got = download<float>(dout);
  const size_t covered = size_t(n_rows - 1) * q_dim;
  size_t written = 0;
  for (size_t i = covered; i < got.size(); ++i) written += got[i] != kSentinel;
  EXPECT_EQ(written, 0u) << "values of the uncovered row written";
  got.resize(covered);
  out.resize(covered);
  // Which kernels ran: the prefill kernel for long sequences, then the
  // tensor-core decode kernel for a batch of the rest, else the CUDA-core
  // kernel (exact in f32 up to summation order).
  bool prefill = false;
  int decode_rows = 0;
  for (const backend::cpu::KvSequence& s : seqs) {
    const bool taken = prefill_attention_takes(
        {.n_heads = c.n_heads, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .cache = dev_cache}, s);
    prefill = prefill || taken;
    if (!taken) decode_rows += s.n_rows;
  }
  const bool decode_mma = attention_mma_takes(c.f16, block_size, c.head_dim, c.n_heads / c.n_kv_heads, decode_rows);
  // The tensor-core kernels round q and P to f16, which shows in the error
  // (NMSE 1e-8 to 1e-7): an exact result there means they did not run.
  const double err = nmse(got, out);
  const bool tensor_cores = prefill || decode_mma;
  const char* which = prefill ? "prefill kernel" : decode_mma ? "tensor-core decode kernel" : "paged kernel";
  EXPECT_LT(err, tensor_cores ? 2e-5 : 1e-10) << which;
  if (tensor_cores) {
    EXPECT_GT(err, 1e-12) << which << ": no f16 rounding, so the tensor cores did not run";
  }
  // The same call writing the 16-bit rows a GEMM reads instead
  // (AttentionOut16): each value the f32 output's rounded to nearest even,
  // the uncovered row untouched.
  for (bool to_f16 : {false, true}) {
    const uint16_t untouched = 0x7fff;
    DeviceBuffer d16 = upload(std::vector<uint16_t>(size_t(n_rows) * q_dim, untouched));
    paged_attention({.q = dq.as<float>(),
                     .out = dout.as<float>(),
                     .q_stride = q_dim,
                     .out_stride = q_dim,
                     .sequences = seqs.data(),
                     .n_sequences = int(seqs.size()),
                     .n_heads = c.n_heads,
                     .n_kv_heads = c.n_kv_heads,
                     .head_dim = c.head_dim,
                     .scale = scale,
                     .sliding_window = c.sliding_window,
                     .cache = dev_cache},
                    {.rows = d16.as<void>(), .f16 = to_f16});
    const std::vector<uint16_t> got16 = download<uint16_t>(d16);
    size_t differ = 0;
    for (size_t i = 0; i < got16.size(); ++i) {
      const uint16_t want = i >= covered ? untouched : to_f16 ? f32_to_f16(got[i]) : f32_to_bf16(got[i]);
      differ += got16[i] != want;
    }
    EXPECT_EQ(differ, 0u) << which << ": " << (to_f16 ? "f16" : "bf16") << " rows differ from the f32 output's";
  }
  return err;
}

TEST(CudaAttention, DecodePrefillGqaSplitsWindows) {
  REQUIRE_CUDA_DEVICE();
  uint32_t seed = 40;
  for (bool f16 : {true, false}) {
    // Llama-3-8B heads, batched decode with ragged contexts (some split).
    check_attention({32, 8, 128, f16, 0, {{0, 1}, {17, 1}, {1023, 1}, {4000, 1}}}, seed++);
    // SmolLM2 heads (group of 3), prefill + decode mixed in one batch.
    check_attention({9, 3, 64, f16, 0, {{0, 37}, {5, 1}, {40, 20}}}, seed++);
    // MHA, head_dim 256, long single-row context: many splits.
    check_attention({4, 4, 256, f16, 0, {{9000, 1}}}, seed++);
    // Sliding window across block boundaries, GQA 8.
    check_attention({16, 2, 128, f16, 33, {{100, 3}, {0, 50}}}, seed++);
    // Batches of decode rows (≥ 8: the kernels with several keys per slot
    // and step), ragged contexts whose last steps are partly past the row's
    // keys, GQA 4 and 8.
    std::vector<std::pair<int, int>> batch;
    for (int s = 0; s < 12; ++s) batch.push_back({s * 97 % 700 + s, 1});
    check_attention({32, 8, 128, f16, 0, batch}, seed++);
    check_attention({32, 4, 128, f16, 0, batch}, seed++);
    check_attention({9, 3, 64, f16, 0, batch}, seed++);
    // The same batch with a sliding window, with one head per KV head, and
    // 8 rows of long contexts (many splits, the combine kernel after the
    // tensor-core decode kernel).
    check_attention({16, 2, 128, f16, 33, batch}, seed++);
    check_attention({8, 8, 64, f16, 0, batch}, seed++);
    std::vector<std::pair<int, int>> long_batch;
    for (int s = 0; s < 8; ++s) long_batch.push_back({3000 + 331 * s, 1});
    check_attention({32, 8, 128, f16, 0, long_batch}, seed++);
  }
}

// Shapes the fast kernels do not take go to the plain kernel of
// attention_any_dim.cu: Gemma 4's head dims (512 on its full layers; 16 and
// 32 in the test models; 48, not a multiple of a warp), groups of 16 query
// heads per KV head, sliding windows, prefill and decode rows in one call.
// f32 arithmetic like the CPU's: exact up to summation order (bound 1e-10).
TEST(CudaAttention, AnyHeadDimAndWideGroups) {
  REQUIRE_CUDA_DEVICE();
  uint32_t seed = 140;
  for (bool f16 : {true, false}) {
    check_attention({4, 2, 16, f16, 0, {{0, 5}, {12, 1}, {3, 37}}}, seed++);
    check_attention({4, 1, 32, f16, 8, {{0, 37}, {20, 1}, {7, 9}}}, seed++);
    check_attention({3, 3, 48, f16, 0, {{30, 2}, {0, 17}}}, seed++);
    check_attention({8, 2, 512, f16, 0, {{0, 20}, {700, 1}, {33, 1}}}, seed++);
    check_attention({32, 4, 512, f16, 100, {{300, 1}, {0, 40}}}, seed++);
    check_attention({32, 2, 128, f16, 0, {{50, 1}, {0, 19}}}, seed++);  // a group of 16
  }
}

// Decode rows whose splits (at most 16) merge in their thread block cluster
// (attention_paged.cuh, merge_in_cluster) instead of the combine kernel: one
// row of 100 and of 250 keys (Llama-3-8B heads), rows of different lengths
// in one call (the short row's cluster has CTAs without keys), SmolLM2's
// group of 3 (also one row of 500 keys: its splits of 32 keys, two steps at
// head_dim 64, are few enough for a cluster), head_dim 256, a sliding
// window, and (f16 cache) a batch of 12 rows on the tensor-core decode
// kernel, which splits it 3 ways; each call also has a row no sequence
// covers.
TEST(CudaAttention, SplitsMergeInTheirCluster) {
  REQUIRE_CUDA_DEVICE();
  std::vector<std::pair<int, int>> batch;
  for (int s = 0; s < 12; ++s) batch.push_back({s * 53 % 300 + s, 1});
  uint32_t seed = 60;
  for (bool f16 : {true, false}) {
    for (const AttentionCase& c : std::vector<AttentionCase>{
             {32, 8, 128, f16, 0, {{100, 1}}},
             {32, 8, 128, f16, 0, {{250, 1}}},
             {32, 8, 128, f16, 0, {{40, 1}, {200, 1}}},
             {9, 3, 64, f16, 0, {{200, 1}, {20, 1}}},
             {9, 3, 64, f16, 0, {{500, 1}}},
             {4, 4, 256, f16, 0, {{250, 1}}},
             {16, 2, 128, f16, 33, {{200, 1}}},
             {32, 8, 128, f16, 0, batch},
         }) {
      int rows = 0, max_keys = 0;
      for (const auto& [n_past, n_rows] : c.sequences) {
        rows += n_rows;
        max_keys = std::max(max_keys, n_past + n_rows);
      }
      const bool mma = attention_mma_takes(c.f16, 16, c.head_dim, c.n_heads / c.n_kv_heads, rows);
      const DecodeSplits split = decode_splits(rows, rows, c.n_kv_heads, c.head_dim, max_keys, mma);
      EXPECT_TRUE(split.cluster_merge) << split.splits << " splits: the combine kernel would merge them";
      EXPECT_GT(split.splits, 1);
      check_attention(c, seed++);
    }
  }
}

// The tensor-core prefill kernel (attention_prefill.cu): several sequences in
// one batch, fresh (n_past 0) and continuing a cache (chunked prefill), row
// counts that are not multiples of its 64-row and 64-key tiles, a decode row
// and a short sequence (paged kernel) in the same call, GQA groups 4 and 1,
// head_dim 64 and 128, sliding windows. Tolerance: see the top of the file.
TEST(CudaAttention, PrefillTensorCoresRaggedGqaWindows) {
  REQUIRE_CUDA_DEVICE();
  const std::vector<AttentionCase> cases = {
      // Llama-3-8B heads: fresh prompt, chunk continuing a cache, decode row, 15-row chunk.
      {32, 8, 128, true, 0, {{0, 130}, {200, 77}, {50, 1}, {31, 15}}},
      // Exactly one tile, and a chunk starting mid-tile of the cache.
      {32, 8, 128, true, 0, {{0, 64}, {37, 16}}},
      // GQA 1 (MHA), head_dim 64.
      {4, 4, 64, true, 0, {{0, 100}, {300, 45}}},
      // GQA 4, head_dim 64, sliding window shorter than a tile.
      {8, 2, 64, true, 40, {{0, 150}, {90, 33}}},
      // GQA 4, head_dim 128, window across tile boundaries, long cache.
      {16, 4, 128, true, 100, {{700, 129}, {0, 17}}},
      // SmolLM2 heads (group 3).
      {9, 3, 64, true, 0, {{0, 200}}},
  };
  uint32_t seed = 80;
  for (const AttentionCase& c : cases) {
    const double err = check_attention(c, seed++);
    std::printf("prefill kernel heads %d/%d d %d window %d: NMSE %.3g\n", c.n_heads, c.n_kv_heads, c.head_dim,
                c.sliding_window, err);
  }
  // The f32 cache stays on the paged kernel (exact).
  check_attention({8, 2, 128, false, 0, {{10, 70}}}, seed++);
}

// The decode step's fused RoPE + K/V store against the three kernels it
// replaces: q, k and both caches bit-identical (f16 and f32 caches, both
// pairings, GQA, a row no sequence covers), and q against the CPU rotation.
TEST(CudaAttention, RopeStoreKvSameBitsAsRopeThenStoreKv) {
  REQUIRE_CUDA_DEVICE();
  const int n_heads = 6, n_kv_heads = 2, head_dim = 64, block_size = 4, n_blocks = 6;
  const int q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim, n_rows = 6;
  std::vector<float> inv_freq(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / head_dim);
  const std::vector<int32_t> pos = {5, 6, 7, 0, 1, 9};  // the last row is covered by no sequence
  const std::vector<int32_t> table_a = {3, 0}, table_b = {5};
  const std::vector<backend::cpu::KvSequence> seqs = {{0, 3, 5, table_a.data(), 2}, {3, 2, 0, table_b.data(), 1}};
  for (bool f16 : {true, false}) {
    for (bool interleaved : {true, false}) {
      const std::vector<float> q = gaussian(size_t(n_rows) * q_dim, 3), k = gaussian(size_t(n_rows) * kv_dim, 4),
                               v = gaussian(size_t(n_rows) * kv_dim, 5);
      const std::vector<uint8_t> cache(size_t(n_blocks) * block_size * kv_dim * (f16 ? 2 : 4), 0x5a);
      DeviceBuffer q1 = upload(q), k1 = upload(k), v1 = upload(v), kc1 = upload(cache), vc1 = upload(cache);
      DeviceBuffer q2 = upload(q), k2 = upload(k), v2 = upload(v), kc2 = upload(cache), vc2 = upload(cache);
      auto rope_of = [&](DeviceBuffer& x, int heads) {
        return backend::cpu::RopeArgs{.x = x.as<float>(),
                                      .positions = pos.data(),
                                      .inv_freq = inv_freq.data(),
                                      .n_rows = n_rows,
                                      .x_stride = heads * head_dim,
                                      .n_heads = heads,
                                      .head_dim = head_dim,
                                      .interleaved = interleaved};
      };
      auto store_of = [&](DeviceBuffer& kb, DeviceBuffer& vb, DeviceBuffer& kc, DeviceBuffer& vc) {
        return backend::cpu::StoreKvArgs{.k = kb.as<float>(),
                                         .v = vb.as<float>(),
                                         .k_stride = kv_dim,
                                         .v_stride = kv_dim,
                                         .sequences = seqs.data(),
                                         .n_sequences = 2,
                                         .kv_dim = kv_dim,
                                         .cache = {kc.as<void>(), vc.as<void>(), f16, n_blocks, block_size}};
      };
      cuda::rope(rope_of(q1, n_heads));  // ADL also finds backend::cpu's
      cuda::rope(rope_of(k1, n_kv_heads));
      cuda::store_kv(store_of(k1, v1, kc1, vc1));
      rope_store_kv(rope_of(q2, n_heads), rope_of(k2, n_kv_heads), store_of(k2, v2, kc2, vc2));
      const std::string what = std::string(f16 ? "f16" : "f32") + (interleaved ? " interleaved" : " neox");
      EXPECT_TRUE(download<float>(q1) == download<float>(q2)) << what << ": q";
      EXPECT_TRUE(download<float>(k1) == download<float>(k2)) << what << ": k";
      const std::vector<uint8_t> kc = download<uint8_t>(kc2);
      EXPECT_TRUE(download<uint8_t>(kc1) == kc) << what << ": K cache";
      EXPECT_TRUE(download<uint8_t>(vc1) == download<uint8_t>(vc2)) << what << ": V cache";
      EXPECT_NE(kc, cache) << what << ": nothing stored";
      std::vector<float> q_ref = q;
      backend::cpu::rope({.x = q_ref.data(),
                          .positions = pos.data(),
                          .inv_freq = inv_freq.data(),
                          .n_rows = n_rows,
                          .x_stride = q_dim,
                          .n_heads = n_heads,
                          .head_dim = head_dim,
                          .interleaved = interleaved});
      EXPECT_LT(nmse(download<float>(q2), q_ref), 1e-9) << what << ": q against the CPU";
    }
  }
}

struct RopeStoreShape {
  int n_heads, n_kv_heads, head_dim, window;
};

// One case of the test below: n_seqs decode rows (sequence 3 two rows when
// two_row_sequence) and an uncovered row, through both paths.
void check_rope_store_kv_in_attention(int n_seqs, const RopeStoreShape& c, bool two_row_sequence, bool f16,
                                      bool interleaved) {
  const int block_size = 16, blocks_per_seq = 64;
  const int n_blocks = n_seqs * blocks_per_seq;  // (b·n_seqs + 7s) mod n_blocks is a permutation: 7 ⊥ n_seqs
  // Rows: one per sequence at these n_past, then an uncovered row.
  const std::vector<int32_t> n_past = {0, 15, 16, 200, 1000, 1, 63, 64, 517};
  std::vector<std::vector<int32_t>> tables(n_seqs);
  std::vector<backend::cpu::KvSequence> seqs;
  std::vector<int32_t> pos;
  for (int s = 0; s < n_seqs; ++s) {
    for (int b = 0; b < blocks_per_seq; ++b) tables[s].push_back((b * n_seqs + s * 7) % n_blocks);
    const int rows = two_row_sequence && s == 3 ? 2 : 1;
    seqs.push_back({int32_t(pos.size()), rows, n_past[s], tables[s].data(), blocks_per_seq});
    for (int i = 0; i < rows; ++i) pos.push_back(n_past[s] + i);
  }
  pos.push_back(7);  // covered by no sequence
  const int n_rows = int(pos.size()), q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  std::vector<float> inv_freq(c.head_dim / 2);
  for (int i = 0; i < c.head_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / c.head_dim);
  const size_t cache_elems = size_t(n_blocks) * block_size * kv_dim, elem = f16 ? 2 : 4;
  const std::vector<float> hist = gaussian(cache_elems, 60);
  std::vector<uint8_t> cache(cache_elems * elem);
  for (size_t i = 0; i < cache_elems; ++i) {
    if (f16)
      reinterpret_cast<uint16_t*>(cache.data())[i] = f32_to_f16(hist[i]);
    else
      reinterpret_cast<float*>(cache.data())[i] = hist[i];
  }
  const std::vector<float> q = gaussian(size_t(n_rows) * q_dim, 61), k = gaussian(size_t(n_rows) * kv_dim, 62),
                           v = gaussian(size_t(n_rows) * kv_dim, 63);
  const std::vector<float> sentinel(size_t(n_rows) * q_dim, kSentinel);
  DeviceBuffer q1 = upload(q), k1 = upload(k), v1 = upload(v), kc1 = upload(cache), vc1 = upload(cache),
               out1 = upload(sentinel);
  DeviceBuffer q2 = upload(q), k2 = upload(k), v2 = upload(v), kc2 = upload(cache), vc2 = upload(cache),
               out2 = upload(sentinel);
  auto rope_of = [&](DeviceBuffer& x, int heads) {
    return backend::cpu::RopeArgs{.x = x.as<float>(),
                                  .positions = pos.data(),
                                  .inv_freq = inv_freq.data(),
                                  .n_rows = n_rows,
                                  .x_stride = heads * c.head_dim,
                                  .n_heads = heads,
                                  .head_dim = c.head_dim,
                                  .interleaved = interleaved};
  };
  auto store_of = [&](DeviceBuffer& kb, DeviceBuffer& vb, DeviceBuffer& kc, DeviceBuffer& vc) {
    return backend::cpu::StoreKvArgs{.k = kb.as<float>(),
                                     .v = vb.as<float>(),
                                     .k_stride = kv_dim,
                                     .v_stride = kv_dim,
                                     .sequences = seqs.data(),
                                     .n_sequences = n_seqs,
                                     .kv_dim = kv_dim,
                                     .cache = {kc.as<void>(), vc.as<void>(), f16, n_blocks, block_size}};
  };
  auto attention_of = [&](DeviceBuffer& qb, DeviceBuffer& out, DeviceBuffer& kc, DeviceBuffer& vc) {
    return backend::cpu::PagedAttentionArgs{.q = qb.as<float>(),
                                            .out = out.as<float>(),
                                            .q_stride = q_dim,
                                            .out_stride = q_dim,
                                            .sequences = seqs.data(),
                                            .n_sequences = n_seqs,
                                            .n_heads = c.n_heads,
                                            .n_kv_heads = c.n_kv_heads,
                                            .head_dim = c.head_dim,
                                            .scale = 1.0f / std::sqrt(float(c.head_dim)),
                                            .sliding_window = c.window,
                                            .cache = {kc.as<void>(), vc.as<void>(), f16, n_blocks, block_size}};
  };
  cuda::rope_store_kv(rope_of(q1, c.n_heads), rope_of(k1, c.n_kv_heads), store_of(k1, v1, kc1, vc1));
  cuda::paged_attention(attention_of(q1, out1, kc1, vc1));  // ADL also finds backend::cpu's
  rope_store_kv_attention(rope_of(q2, c.n_heads), rope_of(k2, c.n_kv_heads), store_of(k2, v2, kc2, vc2),
                          attention_of(q2, out2, kc2, vc2));
  const std::string what =
      "heads " + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) + " d " + std::to_string(c.head_dim) +
      " window " + std::to_string(c.window) + (f16 ? " f16" : " f32") + (interleaved ? " interleaved" : " neox") +
      (two_row_sequence ? " (a two-row sequence)" : "") + ", " + std::to_string(n_seqs) + " sequences";
  const std::vector<float> got = download<float>(out2);
  EXPECT_TRUE(download<float>(out1) == got) << what << ": attention output";
  EXPECT_TRUE(download<uint8_t>(kc1) == download<uint8_t>(kc2)) << what << ": K cache";
  EXPECT_TRUE(download<uint8_t>(vc1) == download<uint8_t>(vc2)) << what << ": V cache";
  EXPECT_NE(got, sentinel) << what << ": nothing written";
  if (two_row_sequence)
    EXPECT_TRUE(download<float>(q2) == download<float>(q1)) << what << ": q rotated";
  else
    EXPECT_TRUE(download<float>(q2) == q) << what << ": q rotated in memory, not in the kernel";
}

// A decode step's RoPE + K/V store taken into the attention kernel
// (rope_store_kv_attention) against rope_store_kv then paged_attention: the
// output and both caches bit-identical, over GQA groups of 3 to 8, head_dim
// 64/128/256, f16 and f32 caches, both pairings, a sliding window, contexts
// from 1 key to ~1,000 (one split to many, the newest key at a block's
// start and end) and a row no sequence covers. q stays unrotated in memory,
// which shows the fused kernel ran; a sequence of two rows takes the two
// launches and must give the same bits too.
TEST(CudaAttention, RopeStoreKvInAttentionSameBitsAsTwoLaunches) {
  REQUIRE_CUDA_DEVICE();
  const RopeStoreShape shapes[] = {{9, 3, 64, 0}, {32, 8, 128, 0}, {8, 1, 256, 0}, {12, 4, 64, 48}};
  // 5 sequences take the CUDA-core kernel, 9 the tensor-core decode kernel
  // at head_dim 64 and 128 (attention_mma_takes).
  for (int n_seqs : {5, 9})
    for (const RopeStoreShape& c : shapes)
      for (bool two_row_sequence : {false, true})
        for (bool f16 : {true, false})
          for (bool interleaved : {true, false})
            check_rope_store_kv_in_attention(n_seqs, c, two_row_sequence, f16, interleaved);
}

TEST(CudaRuntime, TensorRoundTripAndAllocatorReuse) {
  REQUIRE_CUDA_DEVICE();
  Tensor host = Tensor::zeros(DType::F32, {3, 5});
  for (int i = 0; i < 15; ++i) host.data_as<float>()[i] = float(i) * 0.5f;
  Tensor strided = host.slice(1, 1, 4);  // [3, 3] with row stride 5
  Tensor dev = to_device(strided);
  EXPECT_EQ(dev.device(), Device::CUDA);
  Tensor back = to_host(dev);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(back.row_as<float>(r)[c], float(r * 5 + c + 1) * 0.5f);
  synchronize();
  size_t mallocs = allocator_stats().cuda_mallocs;
  for (int i = 0; i < 10; ++i) Tensor t = empty(DType::BF16, {1000, 77});
  EXPECT_LE(allocator_stats().cuda_mallocs, mallocs + 1) << "freed blocks are reused";
  EXPECT_THROW(to_host(host), Error);
}

}  // namespace
}  // namespace brioche::cuda

#else  // CPU build: the harness exists and says so.

TEST(CudaOps, NotBuilt) { GTEST_SKIP() << "skipped: no CUDA device (built without BRIOCHE_CUDA)"; }

#endif
