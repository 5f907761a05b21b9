// The training ops on CUDA tensors against the same ops on CPU tensors
// (the CPU ops are checked against double references and finite differences
// in tests/ops/train_ops_test.cpp and tests/train/backward_ops_test.cpp),
// through the public ops API, on odd shapes and row-padded views.
//
// Error measure: NMSE = Σ(y − ref)² / Σ ref². Tolerances (stated, not tuned):
//   * f32 on both sides (RMSNorm/SwiGLU backward, RoPE backward, f32 GEMMs of
//     matmul_input_grad/matmul_weight_grad, the head with f32 weights,
//     AdamW): NMSE < 1e-10 (AdamW and sums of squares: < 1e-12)
//   * matmul_input_grad through bf16/f16/quantized weights: dy rounded to
//     bf16 (uniform relative error ≤ 2^-9: NMSE ≈ 2^-18/3 ≈ 1.3e-6), f16
//     weights rounded to bf16 as well (≈ 2.6e-6): NMSE < 2e-5
//   * fused logp head, 16-bit and quantized weights, against the CPU head on
//     the same decoded weights in f32: h rounded to bf16 once: logits off by
//     ~1e-3 of their spread, so lse/logp NMSE < 1e-5; d_hidden also goes
//     through softmax weights off by that relative amount and dz rounded to
//     bf16: NMSE < 1e-3 (bf16 class)
//   * lora_matmul / lora_matmul_backward on tensor cores: x, dy, W, A, B, u
//     and g rounded to bf16 once each (uniform relative error ≤ 2^-9, a few
//     roundings per product): NMSE < 1e-4 on y, u, dx, dA and dB (bf16 class)
//   * dropout, fill, scale, gather, ordered scatter: bit-identical
// Without a GPU every test reports "skipped: no CUDA device".
#include <gtest/gtest.h>

#if BRIOCHE_CUDA

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <cstring>
#include <random>
#include <vector>

#include "core/dropout_hash.h"
#include "core/half.h"
#include "core/tensor.h"
#include "ops/adamw.h"
#include "ops/device.h"
#include "ops/dropout.h"
#include "ops/gather_rows.h"
#include "ops/layer_backward.h"
#include "ops/linear_backward.h"
#include "ops/logp_head.h"
#include "ops/lora_matmul.h"
#include "ops/quantize.h"
#include "ops/rope.h"
#include "ops/scaled_add.h"
#include "ops/swiglu.h"
#include "require_cuda.h"

namespace brioche::ops {
namespace {

Tensor random_f32(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, scale);
  Tensor t = Tensor::zeros(DType::F32, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) t.data_as<float>()[i] = g(rng);
  return t;
}

// A [rows, cols] view of a copy of `host` on `device` whose rows are `pad` floats apart beyond cols.
Tensor padded_on(Device device, const Tensor& host, int64_t pad) {
  const int64_t rows = host.dim(0), cols = host.dim(1);
  Tensor big = Tensor::zeros(DType::F32, {rows, cols + pad});
  for (int64_t r = 0; r < rows; ++r) std::memcpy(big.row_ptr(r), host.row_ptr(r), size_t(cols) * 4);
  return to_device(big, device).slice(1, 0, cols);
}

Tensor host(const Tensor& t) { return to_device(t, Device::CPU); }

double nmse(const Tensor& got_any, const Tensor& want_any) {
  Tensor got = host(got_any), want = host(want_any);
  EXPECT_EQ(got.numel(), want.numel());
  double num = 0, den = 0;
  for (int64_t r = 0; r < want.dim(0); ++r) {
    for (int64_t c = 0; c < (want.rank() == 2 ? want.dim(1) : 1); ++c) {
      const double g = want.rank() == 2 ? got.row_as<float>(r)[c] : got.data_as<float>()[r];
      const double w = want.rank() == 2 ? want.row_as<float>(r)[c] : want.data_as<float>()[r];
      if (!std::isfinite(g)) {
        ADD_FAILURE() << "non-finite output " << g << " at " << r << "," << c;
        return INFINITY;
      }
      num += (g - w) * (g - w);
      den += w * w;
    }
  }
  return den > 0 ? num / den : num;
}

void expect_identical(const Tensor& got_any, const Tensor& want_any, const char* what) {
  Tensor got = host(got_any), want = host(want_any);
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const int64_t rows = want.dim(0), cols = want.rank() == 2 ? want.dim(1) : 1;
  for (int64_t r = 0; r < rows; ++r)
    ASSERT_EQ(std::memcmp(got.row_ptr(r), want.row_ptr(r), size_t(cols) * 4), 0) << what << ": row " << r;
}

// ---------------------------------------------------------------- layer backward

TEST(CudaTrainOps, RmsNormAndSwigluBackwardStrided) {
  REQUIRE_CUDA_DEVICE();
  for (auto [rows, dim, pad] : {std::tuple{1, 576, 0}, std::tuple{37, 4096, 3}, std::tuple{33, 97, 5}}) {
    SCOPED_TRACE(testing::Message() << rows << "x" << dim << " pad " << pad);
    Tensor x = random_f32(rows, dim, 1, 2.0f), dy = random_f32(rows, dim, 2), dx0 = random_f32(rows, dim, 3);
    Tensor w = random_f32(1, dim, 4, 0.5f).reshape({dim});
    Tensor dx_cpu = padded_on(Device::CPU, dx0, pad), dx_gpu = padded_on(Device::CUDA, dx0, pad);
    rms_norm_backward(padded_on(Device::CPU, x, pad), w, 1e-5f, padded_on(Device::CPU, dy, pad), dx_cpu);
    rms_norm_backward(padded_on(Device::CUDA, x, pad), to_device(w, Device::CUDA), 1e-5f,
                      padded_on(Device::CUDA, dy, pad), dx_gpu);
    EXPECT_LT(nmse(dx_gpu, dx_cpu), 1e-10) << "rms_norm_backward (accumulating onto dx)";

    // SwiGLU backward with dgate written over dout, as the layer does.
    Tensor g = random_f32(rows, dim, 5, 3.0f), u = random_f32(rows, dim, 6);
    Tensor d_cpu = padded_on(Device::CPU, dy, pad), d_gpu = padded_on(Device::CUDA, dy, pad);
    Tensor du_cpu = Tensor::zeros(DType::F32, {rows, dim}), du_gpu = zeros(DType::F32, {rows, dim}, Device::CUDA);
    swiglu_backward(padded_on(Device::CPU, g, pad), padded_on(Device::CPU, u, pad), d_cpu, d_cpu, du_cpu);
    swiglu_backward(padded_on(Device::CUDA, g, pad), padded_on(Device::CUDA, u, pad), d_gpu, d_gpu, du_gpu);
    EXPECT_LT(nmse(d_gpu, d_cpu), 1e-10) << "swiglu_backward dgate";
    EXPECT_LT(nmse(du_gpu, du_cpu), 1e-10) << "swiglu_backward dup";
  }
}

TEST(CudaTrainOps, RopeBackwardBothPairingsIsTheTranspose) {
  REQUIRE_CUDA_DEVICE();
  for (RopeStyle style : {RopeStyle::Interleaved, RopeStyle::NeoX}) {
    for (auto [rows, heads, head_dim] : {std::tuple{5, 3, 64}, std::tuple{19, 8, 128}, std::tuple{9, 2, 10}}) {
      SCOPED_TRACE(testing::Message() << (style == RopeStyle::NeoX ? "neox" : "interleaved") << " " << rows << "x"
                                      << heads << "x" << head_dim);
      const std::vector<float> inv_freq = rope_inv_freq(head_dim, 500000.0f, {});
      const RopeParams params{.style = style, .n_heads = heads, .head_dim = head_dim, .inv_freq = inv_freq};
      std::vector<int32_t> pos(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) pos[size_t(r)] = r * 3779 % 131072;  // long-context positions
      Tensor x = random_f32(rows, int64_t(heads) * head_dim, 7);
      Tensor cpu = padded_on(Device::CPU, x, 2), gpu = padded_on(Device::CUDA, x, 2);
      rope_backward(cpu, pos, params);
      rope_backward(gpu, pos, params);
      // sincosf on the device vs libm at angles up to ~1e5 rad (as CudaRowOps.Rope*).
      EXPECT_LT(nmse(gpu, cpu), 1e-9);
      rope(gpu, pos, params);  // R(p)·R(−p) = I
      EXPECT_LT(nmse(gpu, x), 1e-10) << "rope after rope_backward";
    }
  }
}

// ---------------------------------------------------------------- linear backward

constexpr DType kAllWeightTypes[] = {
    DType::F32,         DType::F16,          DType::BF16,        DType::Q8_0,        DType::Q4_0,
    DType::Q4_1,        DType::Q4_K,         DType::Q5_K,        DType::Q6_K,        DType::AFFINE4_G32,
    DType::AFFINE4_G64, DType::AFFINE4_G128, DType::AFFINE8_G32, DType::AFFINE8_G64, DType::AFFINE8_G128,
};

Tensor quantized(const Tensor& f32, DType dtype) {
  Tensor w = Tensor::zeros(dtype, {f32.dim(0), f32.dim(1)});
  for (int64_t r = 0; r < f32.dim(0); ++r) quantize_row(dtype, f32.row_as<float>(r), w.row_ptr(r), f32.dim(1));
  return w;
}

struct InputGradCase {
  int64_t n, m, k, pad;
};

void check_input_grad(DType wtype, const InputGradCase& c, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << dtype_name(wtype) << " n=" << c.n << " m=" << c.m << " k=" << c.k
                                  << " pad=" << c.pad);
  Tensor w = quantized(random_f32(c.m, c.k, seed, 0.05f), wtype);
  Tensor w_gpu = to_device(w, Device::CUDA);
  Tensor dy = random_f32(c.n, c.m, seed + 1), dx0 = random_f32(c.n, c.k, seed + 2);
  Tensor ref = Tensor::zeros(DType::F32, {c.n, c.k});
  matmul_input_grad(padded_on(Device::CPU, dy, c.pad), w, ref, GradWrite::Overwrite);
  const double bound = wtype == DType::F32 ? 1e-10 : 2e-5;
  Tensor dy_gpu = padded_on(Device::CUDA, dy, c.pad);
  Tensor dx = padded_on(Device::CUDA, dx0, c.pad + 1);
  matmul_input_grad(dy_gpu, w_gpu, dx, GradWrite::Overwrite);
  const double overwrite = nmse(dx, ref);
  EXPECT_LT(overwrite, bound) << "overwrite";
  // Accumulate onto a prefilled gradient: compare what was added.
  Tensor acc = padded_on(Device::CUDA, dx0, c.pad);
  matmul_input_grad(dy_gpu, w_gpu, acc, GradWrite::Accumulate);
  Tensor added = host(acc);
  for (int64_t r = 0; r < c.n; ++r)
    for (int64_t e = 0; e < c.k; ++e) added.row_as<float>(r)[e] -= dx0.row_as<float>(r)[e];
  EXPECT_LT(nmse(added, ref), bound * 4 + 1e-12) << "accumulate";
  if (c.n * c.m * c.k > 100'000'000)
    std::printf("  [input_grad %s %ldx%ldx%ld] nmse %.2e\n", dtype_name(wtype).data(), long(c.n), long(c.m), long(c.k),
                overwrite);
}

TEST(CudaTrainOps, MatmulInputGradEveryWeightDtype) {
  REQUIRE_CUDA_DEVICE();
  uint32_t seed = 10;
  for (DType t : kAllWeightTypes) {
    for (InputGradCase c :
         {InputGradCase{37, 256, 512, 0}, InputGradCase{5, 70, 256, 3}, InputGradCase{130, 300, 1024, 1}}) {
      check_input_grad(t, c, seed++);
    }
  }
  // Odd sizes for the dense types (quantized rows come in whole blocks).
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (InputGradCase c : {InputGradCase{9, 45, 77, 0}, InputGradCase{1, 3, 5, 2}, InputGradCase{70, 1, 33, 0}})
      check_input_grad(t, c, seed++);
}

TEST(CudaTrainOps, MatmulInputGradSplitsTheReductionIntoTiles) {
  REQUIRE_CUDA_DEVICE();
  // 128 MB bf16 tiles of 16,384 columns hold 4,096 weight rows: 4,224 rows
  // make a full tile and a partial one (β = 1 on the second).
  check_input_grad(DType::Q4_0, {8, 4224, 16384, 0}, 99);
}

TEST(CudaTrainOps, MatmulWeightGradF32Accumulates) {
  REQUIRE_CUDA_DEVICE();
  for (auto [n, m, k, pad] : {std::tuple{1000, 16, 333, 1}, std::tuple{777, 300, 16, 0}, std::tuple{3, 5, 7, 2},
                              std::tuple{8192, 16, 2048, 0}}) {
    SCOPED_TRACE(testing::Message() << "n=" << n << " m=" << m << " k=" << k);
    Tensor dy = random_f32(n, m, 20), x = random_f32(n, k, 21), dw0 = random_f32(m, k, 22, 0.1f);
    Tensor cpu = padded_on(Device::CPU, dw0, pad), gpu = padded_on(Device::CUDA, dw0, pad);
    matmul_weight_grad(padded_on(Device::CPU, dy, pad), padded_on(Device::CPU, x, pad), cpu);
    matmul_weight_grad(padded_on(Device::CUDA, dy, pad), padded_on(Device::CUDA, x, pad), gpu);
    EXPECT_LT(nmse(gpu, cpu), 1e-10);
  }
}

// Three projections of one x: LoRA of rank 4 on a bf16 weight, rank 16 on a
// Q8_0 weight, none on a third; forward and backward (both dx modes) on the
// device against the CPU's f32 composition of the same ops.
void check_lora_matmul(int64_t n, int64_t in, int64_t pad) {
  SCOPED_TRACE(testing::Message() << "n=" << n << " in=" << in << " pad=" << pad);
  const Device kCpu = Device::CPU, kGpu = Device::CUDA;
  struct Proj {
    Tensor w, a, b;  // host
    int64_t out, r;
    float scale;
  };
  std::vector<Proj> projs = {{quantized(random_f32(48, in, 40, 0.05f), DType::BF16), random_f32(4, in, 41, 0.05f),
                              random_f32(48, 4, 42, 0.5f), 48, 4, 2.0f},
                             {quantized(random_f32(64, in, 43, 0.05f), DType::Q8_0), random_f32(16, in, 44, 0.05f),
                              random_f32(64, 16, 45, 0.5f), 64, 16, 0.5f},
                             {quantized(random_f32(32, in, 46, 0.05f), DType::BF16), Tensor(), Tensor(), 32, 0, 0.0f}};
  const Tensor x = random_f32(n, in, 47);
  struct Side {
    std::vector<Tensor> w, a, b, y, u, dy, grad_a, grad_b;
    std::vector<std::optional<LowRank>> lr;
    Tensor x, dx;
  };
  auto side = [&](Device d) {
    Side s;
    s.x = padded_on(d, x, pad);
    for (size_t i = 0; i < projs.size(); ++i) {
      const Proj& p = projs[i];
      s.w.push_back(to_device(p.w, d));
      s.y.push_back(zeros(DType::F32, {n, p.out}, d));
      s.dy.push_back(padded_on(d, random_f32(n, p.out, 50 + uint32_t(i)), pad));
      if (p.r == 0) {
        s.a.emplace_back(), s.b.emplace_back(), s.u.emplace_back(), s.grad_a.emplace_back(), s.grad_b.emplace_back();
        continue;
      }
      s.a.push_back(to_device(p.a, d));
      s.b.push_back(to_device(p.b, d));
      s.u.push_back(zeros(DType::F32, {n, p.r}, d));
      s.grad_a.push_back(to_device(random_f32(p.r, in, 60 + uint32_t(i), 0.1f), d));
      s.grad_b.push_back(to_device(random_f32(p.out, p.r, 70 + uint32_t(i), 0.1f), d));
    }
    s.lr.resize(projs.size());
    for (size_t i = 0; i < projs.size(); ++i)
      if (projs[i].r > 0) s.lr[i].emplace(LowRank{.a = s.a[i], .b = s.b[i], .scale = projs[i].scale});
    std::vector<LoraMatmulPart> parts;
    for (size_t i = 0; i < projs.size(); ++i)
      parts.push_back({s.w[i], s.lr[i] ? &*s.lr[i] : nullptr, s.y[i], projs[i].r ? &s.u[i] : nullptr});
    lora_matmul(s.x, parts);
    return s;
  };
  Side cpu = side(kCpu), gpu = side(kGpu);
  for (size_t i = 0; i < projs.size(); ++i) {
    EXPECT_LT(nmse(gpu.y[i], cpu.y[i]), 1e-4) << "y of projection " << i;
    if (projs[i].r) {
      EXPECT_LT(nmse(gpu.u[i], cpu.u[i]), 1e-4) << "u of projection " << i;
    }
  }
  for (GradWrite mode : {GradWrite::Overwrite, GradWrite::Accumulate}) {
    SCOPED_TRACE(mode == GradWrite::Overwrite ? "overwrite" : "accumulate");
    const Tensor dx0 = random_f32(n, in, 80);
    cpu.dx = padded_on(kCpu, dx0, pad + 1), gpu.dx = padded_on(kGpu, dx0, pad + 1);
    std::vector<Tensor> a0, b0;  // the factor gradients before, to compare the increments
    for (Side* s : {&cpu, &gpu}) {
      std::vector<LoraMatmulGradPart> parts;
      for (size_t i = 0; i < projs.size(); ++i) {
        const bool lora = projs[i].r > 0;
        if (s == &cpu)  // copies (host() of a CPU tensor is the tensor itself)
          a0.push_back(lora ? padded_on(kCpu, s->grad_a[i], 0) : Tensor()),
              b0.push_back(lora ? padded_on(kCpu, s->grad_b[i], 0) : Tensor());
        parts.push_back({s->w[i], s->lr[i] ? &*s->lr[i] : nullptr, lora ? &s->u[i] : nullptr, s->dy[i],
                         lora ? &s->grad_a[i] : nullptr, lora ? &s->grad_b[i] : nullptr});
      }
      lora_matmul_backward(s->x, parts, s->dx, mode);
    }
    auto minus = [](const Tensor& t, const Tensor& before) {
      Tensor out = host(t);
      for (int64_t e = 0; e < out.numel(); ++e) out.data_as<float>()[e] -= before.data_as<float>()[e];
      return out;
    };
    EXPECT_LT(nmse(gpu.dx, cpu.dx), 1e-4) << "dx";
    for (size_t i = 0; i < projs.size(); ++i) {
      if (!projs[i].r) continue;
      EXPECT_LT(nmse(minus(gpu.grad_a[i], a0[i]), minus(cpu.grad_a[i], a0[i])), 1e-4) << "dA of projection " << i;
      EXPECT_LT(nmse(minus(gpu.grad_b[i], b0[i]), minus(cpu.grad_b[i], b0[i])), 1e-4) << "dB of projection " << i;
      cpu.grad_a[i] = padded_on(kCpu, a0[i], 0), gpu.grad_a[i] = padded_on(kGpu, a0[i], 0);  // same start next mode
      cpu.grad_b[i] = padded_on(kCpu, b0[i], 0), gpu.grad_b[i] = padded_on(kGpu, b0[i], 0);
    }
  }
}

// A bf16 copy of an f32 tensor on the device (rounded to nearest even on the host).
Tensor bf16_on_device(const Tensor& host_f32) {
  Tensor h = Tensor::zeros(DType::BF16, {host_f32.dim(0), host_f32.dim(1)});
  for (int64_t r = 0; r < h.dim(0); ++r)
    for (int64_t c = 0; c < h.dim(1); ++c) h.row_as<uint16_t>(r)[c] = f32_to_bf16(host_f32.row_as<float>(r)[c]);
  return to_device(h, Device::CUDA);
}

// bf16 outputs equal the f32 outputs rounded once, bit for bit.
void expect_rounded_of(const Tensor& bf16_dev, const Tensor& f32_dev, const char* what) {
  Tensor got = host(bf16_dev), want = host(f32_dev);
  for (int64_t r = 0; r < want.dim(0); ++r)
    for (int64_t c = 0; c < want.dim(1); ++c)
      ASSERT_EQ(got.row_as<uint16_t>(r)[c], f32_to_bf16(want.row_as<float>(r)[c])) << what << " at " << r << "," << c;
}

// The training MLP's bf16 path: SwiGLU and its backward writing bf16 give
// the f32 kernels' results rounded (vec4 and scalar shapes), and
// lora_matmul(_backward) fed bf16 x and dy gives exactly what it gives when
// it rounds the same f32 x and dy itself.
TEST(CudaTrainOps, Bf16MlpPathsMatchTheF32Ones) {
  REQUIRE_CUDA_DEVICE();
  for (auto [rows, dim, pad] : {std::tuple{37, 4096, 0}, std::tuple{33, 97, 3}}) {
    SCOPED_TRACE(testing::Message() << rows << "x" << dim << " pad " << pad);
    const Tensor g = padded_on(Device::CUDA, random_f32(rows, dim, 90, 3.0f), pad);
    const Tensor u = padded_on(Device::CUDA, random_f32(rows, dim, 91), pad);
    const Tensor d = padded_on(Device::CUDA, random_f32(rows, dim, 92), pad);
    Tensor out32 = zeros(DType::F32, {rows, dim}, Device::CUDA), out16 = zeros(DType::BF16, {rows, dim}, Device::CUDA);
    swiglu(g, u, out32);
    swiglu(g, u, out16);
    expect_rounded_of(out16, out32, "swiglu");
    Tensor dg32 = zeros(DType::F32, {rows, dim}, Device::CUDA), du32 = zeros(DType::F32, {rows, dim}, Device::CUDA);
    Tensor dg16 = zeros(DType::BF16, {rows, dim}, Device::CUDA), du16 = zeros(DType::BF16, {rows, dim}, Device::CUDA);
    swiglu_backward(g, u, d, dg32, du32);
    swiglu_backward(g, u, d, dg16, du16);
    expect_rounded_of(dg16, dg32, "swiglu_backward dgate");
    expect_rounded_of(du16, du32, "swiglu_backward dup");
  }

  const int64_t n = 40, in = 64, out = 48, r = 8;
  const Tensor x = random_f32(n, in, 93), dy = random_f32(n, out, 94);
  const Tensor w = to_device(quantized(random_f32(out, in, 95, 0.05f), DType::BF16), Device::CUDA);
  const Tensor a = to_device(random_f32(r, in, 96, 0.05f), Device::CUDA),
               b = to_device(random_f32(out, r, 97, 0.5f), Device::CUDA);
  const LowRank lr{.a = a, .b = b, .scale = 2.0f};
  struct Result {
    Tensor y, u, dx, grad_a, grad_b;
  };
  auto run = [&](const Tensor& x_in, const Tensor& dy_in) {
    Result res{zeros(DType::F32, {n, out}, Device::CUDA), zeros(DType::F32, {n, r}, Device::CUDA),
               zeros(DType::F32, {n, in}, Device::CUDA), zeros(DType::F32, {r, in}, Device::CUDA),
               zeros(DType::F32, {out, r}, Device::CUDA)};
    const LoraMatmulPart part{w, &lr, res.y, &res.u};
    lora_matmul(x_in, {&part, 1});
    const LoraMatmulGradPart grad{w, &lr, &res.u, dy_in, &res.grad_a, &res.grad_b};
    lora_matmul_backward(x_in, {&grad, 1}, res.dx, GradWrite::Overwrite);
    return res;
  };
  const Result from_f32 = run(to_device(x, Device::CUDA), to_device(dy, Device::CUDA));
  const Result from_bf16 = run(bf16_on_device(x), bf16_on_device(dy));
  expect_identical(from_bf16.y, from_f32.y, "y");
  expect_identical(from_bf16.u, from_f32.u, "u");
  expect_identical(from_bf16.dx, from_f32.dx, "dx");
  expect_identical(from_bf16.grad_a, from_f32.grad_a, "dA");
  expect_identical(from_bf16.grad_b, from_f32.grad_b, "dB");
}

// ops::convert on the device (training's bf16 boundaries): f32 -> bf16
// rounds as the CPU does, bf16 -> f32 is exact.
TEST(CudaTrainOps, ConvertF32Bf16OnDeviceMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  for (auto [rows, cols] : {std::pair{1, 8}, std::pair{37, 4096}, std::pair{5, 97}}) {
    const Tensor x = random_f32(rows, cols, 98, 100.0f);
    const Tensor down = convert(to_device(x, Device::CUDA), DType::BF16);
    const Tensor want = convert(x, DType::BF16);
    Tensor got = host(down);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), size_t(rows * cols) * 2), 0) << rows << "x" << cols;
    expect_identical(convert(down, DType::F32), convert(want, DType::F32), "bf16 -> f32");
  }
}

TEST(CudaTrainOps, LoraMatmulGroupMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  check_lora_matmul(40, 64, 0);    // the tensor-core path
  check_lora_matmul(300, 256, 3);  // the same with row-padded x, dy and dx
  check_lora_matmul(6, 64, 1);     // decode-sized: the f32 composition on the device
}

// Pinned host -> device on the side stream, a kernel that waits for it, and
// back: every byte arrives, in order with the kernel (64 MB so the copies
// take long enough for a missing wait to show).
TEST(CudaTrainOps, CopyAsyncOrdersWithKernels) {
  REQUIRE_CUDA_DEVICE();
  const int64_t rows = 4096, cols = 4096;
  Tensor src = pinned_host_zeros(DType::F32, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) src.data_as<float>()[i] = float(i % 1000);
  Tensor dev = zeros(DType::F32, {rows, cols}, Device::CUDA);
  PendingCopy up = copy_async(src, dev);
  up.wait();
  scale(dev, 2.0f);  // queued after the wait: sees the uploaded values
  Tensor back = pinned_host_zeros(DType::F32, {rows, cols});
  PendingCopy down = copy_async(dev, back);  // starts after scale
  down.wait();
  fill(dev, -1.0f);  // after the download: must not reach `back`
  synchronize(Device::CUDA);
  for (int64_t i = 0; i < rows * cols; ++i)
    ASSERT_EQ(back.data_as<float>()[i], 2.0f * float(i % 1000)) << "element " << i;
}

// ---------------------------------------------------------------- row ops

TEST(CudaTrainOps, DropoutMaskBitIdenticalToCpu) {
  REQUIRE_CUDA_DEVICE();
  const DropoutMask mask{0.1f, dropout_key(77, 3, 5)};
  Tensor x = random_f32(77, 1031, 30);
  Tensor cpu = Tensor::zeros(DType::F32, {77, 1031});
  dropout(x, mask, cpu);
  Tensor gpu = padded_on(Device::CUDA, x, 3);
  dropout(gpu, mask, gpu);  // in place on a padded view
  expect_identical(gpu, cpu, "dropout");
}

TEST(CudaTrainOps, ScaledAddFillGatherScatterMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  Tensor x = random_f32(29, 515, 40), y0 = random_f32(29, 515, 41);
  Tensor y_cpu = padded_on(Device::CPU, y0, 1), y_gpu = padded_on(Device::CUDA, y0, 1);
  add_scaled(x, 0.37f, y_cpu);
  add_scaled(to_device(x, Device::CUDA), 0.37f, y_gpu);
  EXPECT_LT(nmse(y_gpu, y_cpu), 1e-13) << "add_scaled (one fma vs mul+add)";
  scale(y_cpu, -3.0f);
  scale(y_gpu, -3.0f);
  EXPECT_LT(nmse(y_gpu, y_cpu), 1e-13) << "scale";
  Tensor f = padded_on(Device::CUDA, y0, 2);
  fill(f, 0.0f);
  expect_identical(f, Tensor::zeros(DType::F32, {29, 515}), "fill");

  const std::vector<int32_t> rows = {4, 0, 28, 4, 17, 4, 3, 28};
  Tensor g_cpu = Tensor::zeros(DType::F32, {8, 515});
  Tensor g_gpu = zeros(DType::F32, {8, 515}, Device::CUDA);
  gather_rows(y0, rows, g_cpu);
  gather_rows(padded_on(Device::CUDA, y0, 3), rows, g_gpu);
  expect_identical(g_gpu, g_cpu, "gather_rows");
  Tensor s_cpu = padded_on(Device::CPU, x, 0), s_gpu = padded_on(Device::CUDA, x, 5);
  scatter_add_rows(g_cpu, rows, s_cpu);
  scatter_add_rows(g_gpu, rows, s_gpu);
  expect_identical(s_gpu, s_cpu, "scatter_add_rows (row 4 three times, 28 twice)");
}

// ---------------------------------------------------------------- fused head

TEST(CudaTrainOps, LogpHeadMatchesCpuHead) {
  REQUIRE_CUDA_DEVICE();
  const int64_t n = 45, H = 512, V = 5003;
  Tensor h = random_f32(n, H, 50);
  Tensor w_f32 = random_f32(V, H, 51, 3.0f / std::sqrt(float(H)));  // logits spread over ~±10
  std::vector<int32_t> targets(static_cast<size_t>(n));
  Tensor d_logp = Tensor::zeros(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i) {
    targets[size_t(i)] = int32_t((i * 1117 + 3) % V);
    d_logp.data_as<float>()[i] = 0.5f - 0.02f * float(i);
  }
  targets[0] = 0;
  targets[1] = int32_t(V - 1);
  targets[2] = 1023;  // the last row of a 1,024 chunk
  targets[3] = 1024;  // the first of the next
  Tensor dh0 = random_f32(n, H, 52, 0.01f);
  for (DType wtype : {DType::F32, DType::BF16, DType::F16, DType::Q8_0, DType::Q4_K}) {
    Tensor wq = wtype == DType::F32 ? w_f32 : quantized(w_f32, wtype);
    Tensor w_decoded = wtype == DType::F32 ? w_f32 : convert(wq, DType::F32);  // the exact weights, f32
    Tensor w_gpu = to_device(wq, Device::CUDA);
    for (int64_t chunk : {int64_t(1024), int64_t(8192)}) {
      SCOPED_TRACE(testing::Message() << dtype_name(wtype) << " chunk " << chunk);
      const LogpHeadArgs cpu_args{.hidden = h, .weight = w_decoded, .targets = targets, .chunk = chunk};
      Tensor lse_cpu = Tensor::zeros(DType::F32, {n}), logp_cpu = Tensor::zeros(DType::F32, {n});
      logp_head_forward(cpu_args, lse_cpu, logp_cpu);
      Tensor dh_cpu = Tensor::zeros(DType::F32, {n, H});
      logp_head_backward(cpu_args, lse_cpu, d_logp, dh_cpu, GradWrite::Overwrite);

      Tensor h_gpu = padded_on(Device::CUDA, h, 4);
      const LogpHeadArgs gpu_args{.hidden = h_gpu, .weight = w_gpu, .targets = targets, .chunk = chunk};
      Tensor lse = zeros(DType::F32, {n}, Device::CUDA), logp = zeros(DType::F32, {n}, Device::CUDA);
      logp_head_forward(gpu_args, lse, logp);
      Tensor dl = to_device(d_logp, Device::CUDA);
      Tensor dh = padded_on(Device::CUDA, dh0, 2);
      logp_head_backward(gpu_args, lse, dl, dh, GradWrite::Overwrite);
      const bool f32 = wtype == DType::F32;
      const double e_lse = nmse(lse, lse_cpu), e_logp = nmse(logp, logp_cpu), e_dh = nmse(dh, dh_cpu);
      std::printf("  [logp head %s chunk %ld] nmse lse %.2e logp %.2e d_hidden %.2e\n", dtype_name(wtype).data(),
                  long(chunk), e_lse, e_logp, e_dh);
      EXPECT_LT(e_lse, f32 ? 1e-10 : 1e-5) << "lse";
      EXPECT_LT(e_logp, f32 ? 1e-10 : 1e-5) << "logp";
      EXPECT_LT(e_dh, f32 ? 1e-10 : 1e-3) << "d_hidden";
      // Accumulate: the same gradient added onto dh0.
      Tensor acc = padded_on(Device::CUDA, dh0, 1);
      logp_head_backward(gpu_args, lse, dl, acc, GradWrite::Accumulate);
      Tensor added = host(acc);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t e = 0; e < H; ++e) added.row_as<float>(r)[e] -= dh0.row_as<float>(r)[e];
      EXPECT_LT(nmse(added, dh), 1e-10) << "accumulate adds what overwrite writes";
    }
  }
}

// ---------------------------------------------------------------- optimizer

TEST(CudaTrainOps, AdamWAndSumOfSquaresMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  struct Slot {
    Tensor p, g, m, v;
    float lr_scale;
  };
  std::vector<Slot> cpu, gpu;
  uint32_t seed = 60;
  for (auto [size, lr_scale] : {std::pair{int64_t(1), 1.0f}, std::pair{int64_t(1000), 16.0f},
                                std::pair{int64_t(70001), 1.0f}, std::pair{int64_t(196613), 2.0f}}) {
    Slot s{random_f32(1, size, seed, 0.02f), random_f32(1, size, seed + 1, 1e-3f), random_f32(1, size, seed + 2, 1e-4f),
           random_f32(1, size, seed + 3, 1e-4f), lr_scale};
    for (int64_t i = 0; i < size; ++i) s.v.data_as<float>()[i] = std::abs(s.v.data_as<float>()[i]);
    seed += 4;
    gpu.push_back({to_device(s.p, Device::CUDA), to_device(s.g, Device::CUDA), to_device(s.m, Device::CUDA),
                   to_device(s.v, Device::CUDA), lr_scale});
    cpu.push_back(std::move(s));
  }
  auto slots_of = [](std::vector<Slot>& v) {
    std::vector<AdamWSlot> out;
    for (Slot& s : v) out.push_back({&s.p, &s.g, &s.m, &s.v, s.lr_scale});
    return out;
  };
  auto grads_of = [](std::vector<Slot>& v) {
    std::vector<const Tensor*> out;
    for (Slot& s : v) out.push_back(&s.g);
    return out;
  };
  const double sq_cpu = sum_of_squares(grads_of(cpu)), sq_gpu = sum_of_squares(grads_of(gpu));
  EXPECT_NEAR(sq_gpu, sq_cpu, 1e-12 * sq_cpu);
  for (int step = 1; step <= 3; ++step) {
    const AdamWStep hyper{.lr = 2e-4f, .weight_decay = 0.01f, .step = step, .grad_scale = 0.7f};
    adamw_step(slots_of(cpu), hyper);
    adamw_step(slots_of(gpu), hyper);
  }
  for (size_t k = 0; k < cpu.size(); ++k) {
    SCOPED_TRACE(testing::Message() << "slot " << k);
    EXPECT_LT(nmse(gpu[k].p, cpu[k].p), 1e-12) << "param";
    EXPECT_LT(nmse(gpu[k].m, cpu[k].m), 1e-12) << "m";
    EXPECT_LT(nmse(gpu[k].v, cpu[k].v), 1e-12) << "v";
  }
}

// ---------------------------------------------------------------- timing (not a test)

// Llama-3-8B shapes, for the record (docs/training.md): run with
// --gtest_also_run_disabled_tests --gtest_filter='*TrainOpsBench*'.
double milliseconds(const std::function<void()>& f, int reps) {
  f();  // warm-up: cuBLASLt heuristics, allocator
  synchronize(Device::CUDA);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  synchronize(Device::CUDA);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}

// [rows, cols] of dtype on the device from a random 256-row block repeated (fast to make).
Tensor tiled_weight(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  Tensor block = quantized(random_f32(256, cols, seed, 0.02f), dtype);
  Tensor w = Tensor::zeros(dtype, {rows, cols});
  const size_t block_bytes = size_t(block.stride(0)) * 256;
  for (int64_t r = 0; r < rows; r += 256)
    std::memcpy(w.row_ptr(r), block.data(), std::min(block_bytes, size_t(w.stride(0)) * size_t(rows - r)));
  return to_device(w, Device::CUDA);
}

TEST(CudaTrainOpsBench, DISABLED_Llama8BShapes) {
  REQUIRE_CUDA_DEVICE();
  const int64_t n = 8192, H = 4096, I = 14336, V = 128256, r = 16;
  {
    Tensor w = tiled_weight(DType::BF16, V, H, 70);
    Tensor h = to_device(random_f32(n, H, 71), Device::CUDA);
    std::vector<int32_t> targets(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) targets[size_t(i)] = int32_t(i * 7919 % V);
    Tensor lse = zeros(DType::F32, {n}, Device::CUDA), logp = zeros(DType::F32, {n}, Device::CUDA);
    Tensor dl = to_device(random_f32(1, n, 72).reshape({n}), Device::CUDA);
    Tensor dh = zeros(DType::F32, {n, H}, Device::CUDA);
    const LogpHeadArgs args{.hidden = h, .weight = w, .targets = targets, .chunk = 4096};
    const double fwd = milliseconds([&] { logp_head_forward(args, lse, logp); }, 3);
    const double bwd = milliseconds([&] { logp_head_backward(args, lse, dl, dh, GradWrite::Overwrite); }, 3);
    const double flop = 2.0 * double(n) * double(V) * double(H);
    std::printf(
        "  logp head bf16 n=%ld H=%ld V=%ld chunk 4096: forward %.2f ms (%.0f TFLOP/s), backward %.2f ms "
        "(%.0f TFLOP/s)\n",
        long(n), long(H), long(V), fwd, flop / fwd * 1e-9, bwd, 2 * flop / bwd * 1e-9);
  }
  for (DType t : {DType::BF16, DType::Q4_K, DType::Q8_0}) {
    Tensor w = tiled_weight(t, I, H, 73);  // down_proj's input grad: dx[n, I] = dy[n, H]·w... as [I, H] here
    Tensor dy = to_device(random_f32(n, I, 74), Device::CUDA);
    Tensor dx = zeros(DType::F32, {n, H}, Device::CUDA);
    const double ms = milliseconds([&] { matmul_input_grad(dy, w, dx, GradWrite::Accumulate); }, 5);
    std::printf("  matmul_input_grad %s [%ld, %ld]·[%ld, %ld]: %.3f ms (%.0f TFLOP/s)\n", dtype_name(t).data(), long(n),
                long(I), long(I), long(H), ms, 2.0 * n * I * H / ms * 1e-9);
  }
  {
    Tensor dy = to_device(random_f32(n, r, 75), Device::CUDA), x = to_device(random_f32(n, H, 76), Device::CUDA);
    Tensor da = zeros(DType::F32, {r, H}, Device::CUDA);
    const double ms = milliseconds([&] { matmul_weight_grad(dy, x, da); }, 10);
    std::printf("  matmul_weight_grad dA [%ld, %ld] over %ld tokens: %.3f ms (%.0f GB/s of dy and x)\n", long(r),
                long(H), long(n), ms, double(n) * (r + H) * 4 / ms * 1e-6);
    Tensor gx = zeros(DType::F32, {n, I}, Device::CUDA), gu = zeros(DType::F32, {n, I}, Device::CUDA);
    Tensor d = zeros(DType::F32, {n, I}, Device::CUDA), du = zeros(DType::F32, {n, I}, Device::CUDA);
    const double sw = milliseconds([&] { swiglu_backward(gx, gu, d, d, du); }, 10);
    std::printf("  swiglu_backward [%ld, %ld]: %.3f ms (%.0f GB/s)\n", long(n), long(I), sw,
                double(n) * I * 4 * 5 / sw * 1e-6);
    Tensor w = zeros(DType::F32, {H}, Device::CUDA), dx = zeros(DType::F32, {n, H}, Device::CUDA);
    const double rn = milliseconds([&] { rms_norm_backward(x, w, 1e-5f, x, dx); }, 10);
    std::printf("  rms_norm_backward [%ld, %ld]: %.3f ms (%.0f GB/s)\n", long(n), long(H), rn,
                double(n) * H * 4 * 4 / rn * 1e-6);
  }
  {
    // LoRA r16 on q, k, v, o, gate, up, down of 32 layers: 42M parameters.
    std::vector<Tensor> store;
    std::vector<AdamWSlot> slots;
    const int64_t shapes[7][2] = {{H, H}, {H, 1024}, {H, 1024}, {H, H}, {H, I}, {H, I}, {I, H}};
    store.reserve(32 * 7 * 2 * 4);
    int64_t params = 0;
    for (int l = 0; l < 32; ++l) {
      for (const auto& s : shapes) {
        for (int64_t size : {r * s[0], s[1] * r}) {
          for (int j = 0; j < 4; ++j) store.push_back(zeros(DType::F32, {size}, Device::CUDA));
          Tensor* b = &store[store.size() - 4];
          slots.push_back({b, b + 1, b + 2, b + 3, 1.0f});
          params += size;
        }
      }
    }
    std::vector<const Tensor*> grads;
    for (const AdamWSlot& s : slots) grads.push_back(s.grad);
    const double ms = milliseconds([&] { adamw_step(slots, {.lr = 1e-4f, .step = 1}); }, 10);
    const double norm = milliseconds([&] { (void)sum_of_squares(grads); }, 10);
    std::printf("  adamw_step %zu tensors, %.1fM parameters: %.3f ms; sum_of_squares %.3f ms\n", slots.size(),
                double(params) * 1e-6, ms, norm);
  }
}

}  // namespace
}  // namespace brioche::ops

#else

TEST(CudaTrainOps, NotBuilt) { GTEST_SKIP() << "skipped: no CUDA device (built without BRIOCHE_CUDA)"; }

#endif
