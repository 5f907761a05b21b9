// The decode fusions of ops/fused_matmul.h on CUDA against the same ops
// unfused on CUDA (themselves checked against the CPU reference in
// cuda_ops_test.cpp): Q/K/V in one launch, the residual add in the matmul,
// SwiGLU in the gate/up GEMV. Row counts cover the fused GEMV (n ≤ 8) and the
// cuBLASLt fallback (n > 8); weights every dense and several quantized dtypes.
//
// Tolerance: the fused kernels do the same f32 sums per output in the same
// order; only silu's exp differs (__expf vs expf, ~2 ulp): NMSE < 1e-10. The
// MLP op above 8 rows rounds gate and up to 16 bits (bound derived at its
// test).
// The RMSNorm taken into the GEMV (RmsNormFirst) gives the same bits as
// rms_norm followed by the matmul, fused or not.
// The streamed GEMV (one x row, bf16/f16 weights of at least 8 MB) is
// checked against the same ops on the CPU (f32 sums in other orders: NMSE
// < 1e-10), since the unfused CUDA ops at its sizes run it too.
// Without a GPU every test reports "skipped: no CUDA device".
#include <gtest/gtest.h>

#if BRIOCHE_CUDA

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cuda/gemv.cuh"
#include "backend/cuda/gemv_int8.h"
#include "backend/cuda/norm_handoff.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "ops/add.h"
#include "ops/attention.h"
#include "ops/device.h"
#include "ops/fused_matmul.h"
#include "ops/matmul.h"
#include "ops/quantize.h"
#include "ops/rms_norm.h"
#include "ops/swiglu.h"
#include "require_cuda.h"

namespace brioche::ops {
namespace {

Tensor random_f32(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  Tensor t = Tensor::zeros(DType::F32, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) t.data_as<float>()[i] = g(rng);
  return t;
}

// A weight [rows, cols] of `dtype` on the device.
Tensor random_weight(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  Tensor f = random_f32(rows, cols, seed);
  Tensor w = Tensor::zeros(dtype, {rows, cols});
  for (int64_t r = 0; r < rows; ++r) quantize_row(dtype, f.row_as<float>(r), w.row_ptr(r), cols);
  return to_device(w, Device::CUDA);
}

Tensor device_f32(int64_t rows, int64_t cols, uint32_t seed) {
  return to_device(random_f32(rows, cols, seed), Device::CUDA);
}

Tensor on_host(const Tensor& t) { return to_device(t, Device::CPU); }

// A copy of device tensor t in an allocation of its own (through the host).
Tensor device_copy(const Tensor& t) { return to_device(to_device(t, Device::CPU), Device::CUDA); }

double nmse(const Tensor& got_device, const Tensor& want_device) {
  Tensor got = to_device(got_device, Device::CPU), want = to_device(want_device, Device::CPU);
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.data_as<float>()[i], w = want.data_as<float>()[i];
    num += (g - w) * (g - w);
    den += w * w;
  }
  return num / den;
}

const DType kDtypes[] = {DType::BF16, DType::F16,  DType::F32,         DType::Q8_0,        DType::Q4_0,
                         DType::Q4_K, DType::Q6_K, DType::AFFINE4_G64, DType::AFFINE8_G128};
const int kRows[] = {1, 3, 8, 12};

TEST(CudaFusedMatmul, AccumulateAddsToTheResidual) {
  REQUIRE_CUDA_DEVICE();
  const int64_t k = 512, m = 320;
  for (DType dtype : kDtypes) {
    Tensor w = random_weight(dtype, m, k, 1);
    for (int n : kRows) {
      Tensor x = device_f32(n, k, 2), residual = device_f32(n, m, 3);
      Tensor fused = device_copy(residual), plain = zeros(DType::F32, {n, m}, Device::CUDA);
      Tensor scratch = zeros(DType::F32, {n, m}, Device::CUDA);
      matmul_accumulate(x, w, fused, scratch);
      matmul(x, w, plain);
      add(residual, plain, plain);
      EXPECT_LT(nmse(fused, plain), 1e-10) << dtype_name(dtype) << " n=" << n;
    }
  }
}

TEST(CudaFusedMatmul, SwigluMatmulMatchesGateUpSwiglu) {
  REQUIRE_CUDA_DEVICE();
  const int64_t k = 256, inter = 704;
  for (DType dtype : kDtypes) {
    Tensor wg = random_weight(dtype, inter, k, 4), wu = random_weight(dtype, inter, k, 5);
    for (int n : kRows) {
      Tensor x = device_f32(n, k, 6);
      Tensor fused = zeros(DType::F32, {n, inter}, Device::CUDA), scratch = zeros(DType::F32, {n, inter}, Device::CUDA);
      Tensor g = zeros(DType::F32, {n, inter}, Device::CUDA), u = zeros(DType::F32, {n, inter}, Device::CUDA);
      swiglu_matmul(x, {.gate = wg, .up = wu}, fused, scratch);
      matmul(x, wg, g);
      matmul(x, wu, u);
      swiglu(g, u, g);
      EXPECT_LT(nmse(fused, g), 1e-10) << dtype_name(dtype) << " n=" << n;
    }
  }
}

TEST(CudaFusedMatmul, GroupOfThreeMatchesSeparateMatmuls) {
  REQUIRE_CUDA_DEVICE();
  const int64_t k = 512;
  const int64_t ms[] = {384, 128, 128};  // Q, K, V of a GQA layer
  for (DType dtype : kDtypes) {
    Tensor w[3], got[3], want[3];
    for (int i = 0; i < 3; ++i) w[i] = random_weight(dtype, ms[i], k, 10 + i);
    for (int n : kRows) {
      Tensor x = device_f32(n, k, 7);
      for (int i = 0; i < 3; ++i) {
        got[i] = zeros(DType::F32, {n, ms[i]}, Device::CUDA);
        want[i] = zeros(DType::F32, {n, ms[i]}, Device::CUDA);
        matmul(x, w[i], want[i]);
      }
      const Tensor* ws[] = {&w[0], &w[1], &w[2]};
      Tensor* ys[] = {&got[0], &got[1], &got[2]};
      matmul_group(x, ws, ys);
      for (int i = 0; i < 3; ++i)
        EXPECT_LT(nmse(got[i], want[i]), 1e-10) << dtype_name(dtype) << " n=" << n << " part " << i;
    }
  }
}

// The same bytes in every row.
void expect_same_bits(const Tensor& got_device, const Tensor& want_device, const std::string& what) {
  Tensor got = to_device(got_device, Device::CPU), want = to_device(want_device, Device::CPU);
  int64_t differ = 0;
  for (int64_t r = 0; r < want.dim(0); ++r)
    differ += std::memcmp(got.row_ptr(r), want.row_ptr(r), size_t(want.dim(1)) * 4) != 0;
  EXPECT_EQ(differ, 0) << what << ": rows differing from rms_norm then the matmul";
}

bool all_nan(const Tensor& device) {
  Tensor t = to_device(device, Device::CPU);
  for (int64_t r = 0; r < t.dim(0); ++r)
    for (int64_t c = 0; c < t.dim(1); ++c)
      if (!std::isnan(t.row_as<float>(r)[c])) return false;
  return true;
}

Tensor nan_f32(int64_t rows, int64_t cols) {
  Tensor t = Tensor::zeros(DType::F32, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) t.data_as<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  return to_device(t, Device::CUDA);
}

// Where the GEMV takes the norm itself (n ≤ 8; dense weights with x̂ in 46 KB,
// the int8 path's types at any k up to 16,384), and where the GEMMs (n > 8)
// read x̂ as the 16-bit rows one norm kernel writes (all but f32 weights),
// `normed` stays untouched (NaN here), which shows the fused kernel ran;
// elsewhere it holds rms_norm(x).
bool norm_is_fused(DType dtype, int64_t n, int64_t k) {
  const bool int8_path = dtype == DType::Q8_0 || dtype == DType::Q4_0 || dtype == DType::Q4_1 || dtype == DType::Q4_K ||
                         dtype == DType::Q6_K;
  if (n > 8) return dtype != DType::F32;
  return int8_path ? k <= 16384 : k % 4 == 0 && k <= 4096 && n * k * 4 <= 46 * 1024;
}

TEST(CudaFusedMatmul, RmsNormFirstSameBitsAsRmsNormThenMatmul) {
  REQUIRE_CUDA_DEVICE();
  const DType dtypes[] = {DType::BF16, DType::F16,  DType::F32,  DType::Q8_0,
                          DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K};
  const int64_t ks[] = {576, 4096, 8192};
  const int64_t ms[] = {192, 64, 64};
  for (DType dtype : dtypes) {
    for (int64_t k : ks) {
      if (k % dtype_info(dtype).block_elems != 0) continue;  // K-quants: 256-value super-blocks
      Tensor w[3];
      for (int i = 0; i < 3; ++i) w[i] = random_weight(dtype, ms[i], k, 20 + i);
      Tensor norm_w = device_f32(1, k, 30).reshape({k});
      for (int n : kRows) {
        const std::string what = std::string(dtype_name(dtype)) + " k=" + std::to_string(k) + " n=" + std::to_string(n);
        // x as rows of a wider tensor (row stride k + 64).
        Tensor wide = device_f32(n, k + 64, 31);
        Tensor x = wide.slice(1, 0, k);
        Tensor h = zeros(DType::F32, {n, k}, Device::CUDA), normed = nan_f32(n, k);
        rms_norm(x, norm_w, 1e-5f, h);
        Tensor got[3], want[3];
        for (int i = 0; i < 3; ++i) {
          got[i] = zeros(DType::F32, {n, ms[i]}, Device::CUDA);
          want[i] = zeros(DType::F32, {n, ms[i]}, Device::CUDA);
        }
        const Tensor* ws[] = {&w[0], &w[1], &w[2]};
        Tensor* want_ys[] = {&want[0], &want[1], &want[2]};
        Tensor* got_ys[] = {&got[0], &got[1], &got[2]};
        matmul_group(h, ws, want_ys);
        matmul_group(x, {.weight = norm_w, .eps = 1e-5f, .normed = normed}, ws, got_ys);
        for (int i = 0; i < 3; ++i) expect_same_bits(got[i], want[i], what + " group part " + std::to_string(i));
        if (norm_is_fused(dtype, n, k))
          EXPECT_TRUE(all_nan(normed)) << what << ": normed written, norm not fused";
        else
          expect_same_bits(normed, h, what + " normed");

        Tensor gate = zeros(DType::F32, {n, ms[1]}, Device::CUDA), up = zeros(DType::F32, {n, ms[1]}, Device::CUDA);
        Tensor gate_want = zeros(DType::F32, {n, ms[1]}, Device::CUDA),
               up_want = zeros(DType::F32, {n, ms[1]}, Device::CUDA);
        swiglu_matmul(h, {.gate = w[1], .up = w[2]}, gate_want, up_want);
        swiglu_matmul(x, {.weight = norm_w, .eps = 1e-5f, .normed = normed}, {.gate = w[1], .up = w[2]}, gate, up);
        expect_same_bits(gate, gate_want, what + " swiglu");
      }
    }
  }
}

TEST(CudaFusedMatmul, RmsNormFirstOnMixedDtypesAndOddShapes) {
  REQUIRE_CUDA_DEVICE();
  // Q4_K_M files store V as Q6_K: the group is three launches on x̂ from one norm.
  const int64_t k = 512;
  Tensor wq = random_weight(DType::Q4_K, 256, k, 40), wk = random_weight(DType::Q4_K, 64, k, 41),
         wv = random_weight(DType::Q6_K, 64, k, 42);
  Tensor norm_w = device_f32(1, k, 43).reshape({k});
  for (int n : kRows) {
    Tensor x = device_f32(n, k, 44), h = zeros(DType::F32, {n, k}, Device::CUDA), normed = nan_f32(n, k);
    rms_norm(x, norm_w, 1e-6f, h);
    Tensor got[3], want[3];
    const int64_t ms[] = {256, 64, 64};
    for (int i = 0; i < 3; ++i) {
      got[i] = zeros(DType::F32, {n, ms[i]}, Device::CUDA);
      want[i] = zeros(DType::F32, {n, ms[i]}, Device::CUDA);
    }
    matmul(h, wq, want[0]);
    matmul(h, wk, want[1]);
    matmul(h, wv, want[2]);
    const Tensor* ws[] = {&wq, &wk, &wv};
    Tensor* ys[] = {&got[0], &got[1], &got[2]};
    matmul_group(x, {.weight = norm_w, .eps = 1e-6f, .normed = normed}, ws, ys);
    for (int i = 0; i < 3; ++i) expect_same_bits(got[i], want[i], "mixed n=" + std::to_string(n));
    expect_same_bits(normed, h, "mixed normed n=" + std::to_string(n));
  }
  // k not a multiple of 4: the norm is a kernel of its own (unaligned rows).
  const int64_t odd_k = 103;
  Tensor w = random_weight(DType::BF16, 40, odd_k, 45);
  Tensor odd_norm = device_f32(1, odd_k, 46).reshape({odd_k});
  Tensor x = device_f32(3, odd_k, 47), h = zeros(DType::F32, {3, odd_k}, Device::CUDA), normed = nan_f32(3, odd_k);
  Tensor got = zeros(DType::F32, {3, 40}, Device::CUDA), want = zeros(DType::F32, {3, 40}, Device::CUDA);
  rms_norm(x, odd_norm, 1e-6f, h);
  matmul(h, w, want);
  const Tensor* ws[] = {&w};
  Tensor* ys[] = {&got};
  matmul_group(x, {.weight = odd_norm, .eps = 1e-6f, .normed = normed}, ws, ys);
  expect_same_bits(got, want, "odd k");
  expect_same_bits(normed, h, "odd k normed");
}

// Weights stacked in one allocation, as model/device_weights.cpp places
// Q/K/V and gate/up: batches up to 512 rows take one GEMM over the stacked
// rows (backend/cuda/matmul.cu) and must match the matmuls of separate
// copies; 600 rows take the separate GEMMs, unless the outputs lie side by
// side (the model's q, k, v), which one GEMM writes in place at any row
// count. The stacked SwiGLU leaves its scratch unwritten, which shows that
// path ran.
TEST(CudaFusedMatmul, StackedWeightsMatchSeparateOnes) {
  REQUIRE_CUDA_DEVICE();
  const int64_t k = 512, inter = 320;
  const int64_t ms[] = {384, 128, 128};  // Q, K, V of a GQA layer; gate and up are the halves
  for (DType dtype : kDtypes) {
    const Tensor all = random_weight(dtype, 640, k, 20);
    const Tensor w[3] = {all.slice(0, 0, 384), all.slice(0, 384, 512), all.slice(0, 512, 640)};
    const Tensor gate = all.slice(0, 0, inter), up = all.slice(0, inter, 2 * inter);
    for (int n : {12, 64, 600}) {
      const std::string what = std::string(dtype_name(dtype)) + " n=" + std::to_string(n);
      Tensor x = device_f32(n, k, 21), got[3], want[3];
      for (int i = 0; i < 3; ++i) {
        got[i] = zeros(DType::F32, {n, ms[i]}, Device::CUDA);
        want[i] = zeros(DType::F32, {n, ms[i]}, Device::CUDA);
        matmul(x, device_copy(w[i]), want[i]);
      }
      const Tensor* ws[] = {&w[0], &w[1], &w[2]};
      Tensor* ys[] = {&got[0], &got[1], &got[2]};
      matmul_group(x, ws, ys);
      for (int i = 0; i < 3; ++i) EXPECT_LT(nmse(got[i], want[i]), 1e-10) << what << " part " << i;
      // Outputs side by side in one row (the model's q, k, v): the stacked
      // GEMM writes them in place.
      Tensor qkv = nan_f32(n, 640);
      Tensor side[3] = {qkv.slice(1, 0, 384), qkv.slice(1, 384, 512), qkv.slice(1, 512, 640)};
      Tensor* side_ys[] = {&side[0], &side[1], &side[2]};
      matmul_group(x, ws, side_ys);
      for (int i = 0; i < 3; ++i) {
        Tensor dense = zeros(DType::F32, {n, ms[i]}, Device::CUDA);
        copy(side[i], dense);
        EXPECT_LT(nmse(dense, want[i]), 1e-10) << what << " side by side, part " << i;
      }

      Tensor fused = zeros(DType::F32, {n, inter}, Device::CUDA), scratch = nan_f32(n, inter);
      Tensor g = zeros(DType::F32, {n, inter}, Device::CUDA), u = zeros(DType::F32, {n, inter}, Device::CUDA);
      swiglu_matmul(x, {.gate = gate, .up = up}, fused, scratch);
      matmul(x, device_copy(gate), g);
      matmul(x, device_copy(up), u);
      swiglu(g, u, g);
      EXPECT_LT(nmse(fused, g), 1e-10) << what << " swiglu";
      EXPECT_EQ(all_nan(scratch), n <= 512) << what << ": the scratch is written exactly when the GEMMs are separate";
    }
  }
}

// The MLP with its residual add in one op, against swiglu_matmul then
// matmul_accumulate. Above 8 rows (16-bit or quantized weights) the gate and
// up GEMMs write 16-bit outputs and SwiGLU reads them and writes the down
// GEMM's 16-bit rows itself, so gate and up are rounded to the GEMMs' type
// (bf16; f16 for f16 weights) where the two ops keep them f32. The NMSE
// between the two is then the mean squares of those two roundings, and of
// h's rounding taken on the two slightly different values (two more), each
// at most u²/3 (u = 2^-8 for bf16, 2^-11 for f16): bound 4 × 4 × u²/3
// (1 + g·σ(−g), SiLU's gain on gate's relative error, and the sample's
// spread; a simulation of these roundings gives 1.3e-5 for bf16, 2e-7 for
// f16, without the residual, which only lowers it). Below, and for f32
// weights, the op is the two ops: NMSE < 1e-10. The f32 hidden rows and the
// up scratch are left unwritten on the 16-bit path, which shows it ran. y is
// x, as in the model.
double swiglu_mlp_bound(DType dtype, int n) {
  if (n <= 8 || dtype == DType::F32) return 1e-10;
  const double u = std::ldexp(1.0, dtype == DType::F16 ? -11 : -8);
  return 4 * 4 * u * u / 3;
}

TEST(CudaFusedMatmul, SwigluMlpMatchesSwigluThenDown) {
  REQUIRE_CUDA_DEVICE();
  const int64_t k = 256, inter = 512;
  for (DType dtype : kDtypes) {
    const Tensor gate_up = random_weight(dtype, 2 * inter, k, 50);
    const Tensor gate = gate_up.slice(0, 0, inter), up = gate_up.slice(0, inter, 2 * inter);
    const Tensor down = random_weight(dtype, k, inter, 51);
    const Tensor norm_w = device_f32(1, k, 52).reshape({k});
    for (int n : {3, 8, 12, 64, 600}) {
      const std::string what = std::string(dtype_name(dtype)) + " n=" + std::to_string(n);
      const bool gate_up_16bit = n > 8 && dtype != DType::F32;
      const Tensor x = device_f32(n, k, 53);
      Tensor fused = zeros(DType::F32, {n, k}, Device::CUDA), plain = zeros(DType::F32, {n, k}, Device::CUDA);
      copy(x, fused);
      copy(x, plain);
      Tensor normed = nan_f32(n, k), hidden = nan_f32(n, inter), scratch = nan_f32(n, inter);
      Tensor y_scratch = nan_f32(n, k);
      swiglu_mlp(
          fused, {.weight = norm_w, .eps = 1e-6f, .normed = normed},
          {.w_gate = gate, .w_up = up, .w_down = down, .hidden = hidden, .scratch = scratch, .y_scratch = y_scratch},
          fused);
      EXPECT_EQ(all_nan(hidden), gate_up_16bit) << what << ": hidden written";
      if (gate_up_16bit) {
        EXPECT_TRUE(all_nan(scratch)) << what << ": the up scratch written";
      }
      Tensor h = nan_f32(n, inter);
      swiglu_matmul(plain, {.weight = norm_w, .eps = 1e-6f, .normed = normed}, {.gate = gate, .up = up}, h, scratch);
      matmul_accumulate(h, down, plain, y_scratch);
      EXPECT_LT(nmse(fused, plain), swiglu_mlp_bound(dtype, n)) << what;
    }
  }
}

// Attention with its output projection and residual add in one op, against
// paged_attention then matmul_accumulate: 12 decode rows and a 20-row prompt
// (the tensor-core decode and prefill kernels). Above 8 rows the attention
// kernels write the projection GEMM's 16-bit rows, so only the GEMM's own
// summation may differ, and the f32 output is left unwritten (for 16-bit and
// quantized weights), which shows that path ran.
TEST(CudaFusedMatmul, AttentionThenProjectionMatchesTwoOps) {
  REQUIRE_CUDA_DEVICE();
  const int n_heads = 8, n_kv_heads = 2, head_dim = 64, block_size = 16, blocks_per_seq = 4;
  const int64_t q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim, hidden = 256;
  std::vector<int32_t> tables;
  std::vector<AttentionSequence> seqs;
  std::vector<int32_t> positions;
  const int n_seqs = 13;
  for (int s = 0; s < n_seqs; ++s)
    for (int b = 0; b < blocks_per_seq; ++b) tables.push_back((b * n_seqs + s * 5) % (n_seqs * blocks_per_seq));
  for (int s = 0; s < n_seqs; ++s) {
    const int rows = s == 6 ? 20 : 1, n_past = s == 6 ? 17 : 3 * s;
    seqs.push_back(
        {.first_row = int32_t(positions.size()),
         .n_rows = rows,
         .n_past = n_past,
         .block_table = std::span<const int32_t>(tables).subspan(size_t(s) * blocks_per_seq, blocks_per_seq)});
    for (int i = 0; i < rows; ++i) positions.push_back(n_past + i);
  }
  const int64_t n = int64_t(positions.size());
  std::vector<float> inv_freq(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / head_dim);
  const RopeParams rope{.n_heads = n_heads, .head_dim = head_dim, .inv_freq = inv_freq};
  const AttentionParams params{.n_heads = n_heads, .n_kv_heads = n_kv_heads, .head_dim = head_dim, .scale = 0.125f};
  const Tensor q0 = device_f32(n, q_dim, 60), k0 = device_f32(n, kv_dim, 61), v0 = device_f32(n, kv_dim, 62);
  const Tensor residual = device_f32(n, hidden, 63);
  Tensor cache_host = Tensor::zeros(DType::F16, {n_seqs * blocks_per_seq, block_size, n_kv_heads, head_dim});
  const Tensor history = random_f32(n_seqs * blocks_per_seq * block_size, kv_dim, 64);
  for (int64_t i = 0; i < history.numel(); ++i)
    static_cast<uint16_t*>(cache_host.data())[i] = f32_to_f16(history.data_as<float>()[i]);
  const Tensor cache0 = to_device(cache_host, Device::CUDA);
  for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::Q4_K}) {
    const Tensor wo = random_weight(dtype, hidden, q_dim, 65);
    Tensor q1 = device_copy(q0), k1 = device_copy(k0), kc1 = device_copy(cache0), vc1 = device_copy(cache0);
    Tensor q2 = device_copy(q0), k2 = device_copy(k0), kc2 = device_copy(cache0), vc2 = device_copy(cache0);
    Tensor y1 = device_copy(residual), y2 = device_copy(residual);
    Tensor out1 = nan_f32(n, q_dim), out2 = nan_f32(n, q_dim), scratch = nan_f32(n, hidden);
    paged_attention(q1, {.k = k1, .v = v0, .positions = positions, .q_rope = rope},
                    {.k = kc1, .v = vc1, .sequences = seqs}, params, {.x = out1, .w = wo, .y = y1, .scratch = scratch});
    paged_attention(q2, {.k = k2, .v = v0, .positions = positions, .q_rope = rope},
                    {.k = kc2, .v = vc2, .sequences = seqs}, params, out2);
    matmul_accumulate(out2, wo, y2, scratch);
    EXPECT_LT(nmse(y1, y2), 1e-10) << dtype_name(dtype);
    const Tensor kc1_host = to_device(kc1, Device::CPU), kc2_host = to_device(kc2, Device::CPU);
    EXPECT_EQ(std::memcmp(kc1_host.data(), kc2_host.data(), kc1_host.nbytes()), 0) << dtype_name(dtype) << " K cache";
    EXPECT_EQ(all_nan(out1), dtype != DType::F32) << dtype_name(dtype) << ": the f32 output written";
  }
}

// The same op at ≤ 8 decode rows with weights on the int8 GEMV path: the
// attention's last kernel (the attention itself at one split, else the
// combine) writes the GEMV's int8 blocks with the bits of the quantization
// kernel, so the result has the bits of paged_attention then
// matmul_accumulate, and the f32 output is not written. Cases: one split
// (short contexts) and several, head_dim 64 and 128, 1 to 8 rows, and the
// Llama-3-8B O shape (Q8_0/Q4_0/Q4_K at k 4,096: the streamed GEMV, whose
// predecessors then release it before their PDL wait).
TEST(CudaFusedMatmul, AttentionThenInt8ProjectionSameBitsAsTwoOps) {
  REQUIRE_CUDA_DEVICE();
  struct Case {
    int n_heads, n_kv_heads, head_dim, n_rows, n_past;
    int64_t hidden;
    std::vector<DType> dtypes;
  };
  const Case cases[] = {
      {8, 2, 64, 3, 5, 256, {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K}},
      {8, 2, 64, 8, 200, 256, {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K}},
      {4, 4, 128, 1, 700, 512, {DType::Q4_0, DType::Q6_K}},
      {32, 8, 128, 1, 300, 4096, {DType::Q8_0, DType::Q4_0, DType::Q4_K}},
  };
  constexpr int kBlockSize = 16;
  for (const Case& c : cases) {
    const int last_position = c.n_past + 7 * (c.n_rows - 1);  // row s is at n_past + 7s
    const int blocks_per_seq = last_position / kBlockSize + 2;
    const int64_t q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
    std::vector<int32_t> tables, positions;
    std::vector<AttentionSequence> seqs;
    for (int s = 0; s < c.n_rows; ++s)
      for (int b = 0; b < blocks_per_seq; ++b) tables.push_back(b * c.n_rows + s);
    for (int s = 0; s < c.n_rows; ++s) {
      const int n_past = c.n_past + 7 * s;  // each row its own context length
      seqs.push_back(
          {.first_row = s,
           .n_rows = 1,
           .n_past = n_past,
           .block_table = std::span<const int32_t>(tables).subspan(size_t(s) * blocks_per_seq, blocks_per_seq)});
      positions.push_back(n_past);
    }
    std::vector<float> inv_freq(c.head_dim / 2);
    for (int i = 0; i < c.head_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / c.head_dim);
    const RopeParams rope{.n_heads = c.n_heads, .head_dim = c.head_dim, .inv_freq = inv_freq};
    const AttentionParams params{.n_heads = c.n_heads,
                                 .n_kv_heads = c.n_kv_heads,
                                 .head_dim = c.head_dim,
                                 .scale = 1.0f / std::sqrt(float(c.head_dim))};
    const int64_t n = c.n_rows, cache_rows = int64_t(c.n_rows) * blocks_per_seq * kBlockSize;
    const Tensor q0 = device_f32(n, q_dim, 70), k0 = device_f32(n, kv_dim, 71), v0 = device_f32(n, kv_dim, 72);
    const Tensor residual = device_f32(n, c.hidden, 73);
    Tensor cache_host = Tensor::zeros(DType::F16, {c.n_rows * blocks_per_seq, kBlockSize, c.n_kv_heads, c.head_dim});
    const Tensor history = random_f32(cache_rows, kv_dim, 74);
    for (int64_t i = 0; i < history.numel(); ++i)
      static_cast<uint16_t*>(cache_host.data())[i] = f32_to_f16(history.data_as<float>()[i]);
    const Tensor cache0 = to_device(cache_host, Device::CUDA);
    for (DType dtype : c.dtypes) {
      const std::string what = std::string(dtype_name(dtype)) + " heads " + std::to_string(c.n_heads) + "/" +
                               std::to_string(c.n_kv_heads) + "×" + std::to_string(c.head_dim) + ", " +
                               std::to_string(c.n_rows) + " rows from " + std::to_string(c.n_past) + " keys";
      const Tensor wo = random_weight(dtype, c.hidden, q_dim, 75);
      Tensor q1 = device_copy(q0), k1 = device_copy(k0), kc1 = device_copy(cache0), vc1 = device_copy(cache0);
      Tensor q2 = device_copy(q0), k2 = device_copy(k0), kc2 = device_copy(cache0), vc2 = device_copy(cache0);
      Tensor y1 = device_copy(residual), y2 = device_copy(residual);
      Tensor out1 = nan_f32(n, q_dim), out2 = nan_f32(n, q_dim), scratch = nan_f32(n, c.hidden);
      paged_attention(q1, {.k = k1, .v = v0, .positions = positions, .q_rope = rope},
                      {.k = kc1, .v = vc1, .sequences = seqs}, params,
                      {.x = out1, .w = wo, .y = y1, .scratch = scratch});
      paged_attention(q2, {.k = k2, .v = v0, .positions = positions, .q_rope = rope},
                      {.k = kc2, .v = vc2, .sequences = seqs}, params, out2);
      matmul_accumulate(out2, wo, y2, scratch);
      const Tensor y1_host = on_host(y1), y2_host = on_host(y2);
      EXPECT_EQ(std::memcmp(y1_host.data(), y2_host.data(), y1_host.nbytes()), 0) << what;
      const Tensor kc1_host = on_host(kc1), kc2_host = on_host(kc2);
      EXPECT_EQ(std::memcmp(kc1_host.data(), kc2_host.data(), kc1_host.nbytes()), 0) << what << ": K cache";
      EXPECT_TRUE(all_nan(out1)) << what << ": the f32 output written";
    }
  }
}

// ---------------------------------------------------------------- streamed GEMV
// backend/cuda/gemv_stream.cu. Shapes cover a partial last group (rows not a multiple of 8), a
// partial last tile (k = 2,048 + 8) and a group of 8 rows straddling two
// parts.

const DType kStreamDtypes[] = {DType::BF16, DType::F16};
constexpr int64_t kStreamKs[] = {2056, 4096};  // a partial last tile, whole tiles

// Rows making at least 8.4 MB of `dtype` weights of k columns, a multiple of 8.
int64_t stream_rows(DType dtype, int64_t k) {
  const int64_t rows = (int64_t(8.4 * (1 << 20)) + int64_t(row_bytes(dtype, k)) - 1) / int64_t(row_bytes(dtype, k));
  return (rows + 7) / 8 * 8;
}

// Whether a launch of x's rows over weight `w` (SwiGLU's gate, with w_up; x̂
// through norm_w) goes to a streamed kernel: gemv_stream.cu's for 16-bit
// weights, gemv_stream_rows.cu's for Q8_0/Q4_0/Q4_K/Q5_K/Q6_K.
bool streams(const Tensor& x, const Tensor& w, const Tensor* w_up = nullptr, const Tensor* norm_w = nullptr) {
  cuda::detail::GemvArgs a{.x = x.data_as<float>(), .ldx = x.stride(0) / 4, .n = int(x.dim(0)), .k = w.dim(1)};
  if (w_up != nullptr) a.w_up = w_up->data();
  if (norm_w != nullptr) a.norm_w = norm_w->data_as<float>();
  a.parts[0] = {.w = w.data(), .w_row_bytes = size_t(w.stride(0)), .y = nullptr, .ldy = 0, .m = w.dim(0)};
  a.m = w.dim(0);
  if (dtype_info(w.dtype()).quantized) return cuda::detail::gemv_stream_rows_takes(w.dtype(), a);
  return cuda::detail::gemv_stream_takes(w.dtype(), a);
}

TEST(CudaFusedMatmul, StreamedMatmulAndAccumulateMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  for (DType dtype : kStreamDtypes) {
    for (int64_t k : kStreamKs) {
      const int64_t m = stream_rows(dtype, k) + 3;  // a last group of 3 rows
      const std::string what = std::string(dtype_name(dtype)) + " m=" + std::to_string(m) + " k=" + std::to_string(k);
      const Tensor w = random_weight(dtype, m, k, 60), x = device_f32(1, k, 61);
      ASSERT_TRUE(streams(x, w)) << what;
      Tensor got = zeros(DType::F32, {1, m}, Device::CUDA), want = Tensor::zeros(DType::F32, {1, m});
      matmul(x, w, got);
      matmul(on_host(x), on_host(w), want);
      EXPECT_LT(nmse(got, to_device(want, Device::CUDA)), 1e-10) << what;

      const Tensor residual = device_f32(1, m, 62);
      Tensor got_acc = device_copy(residual), want_acc = on_host(residual);
      Tensor scratch = zeros(DType::F32, {1, m}, Device::CUDA), host_scratch = Tensor::zeros(DType::F32, {1, m});
      matmul_accumulate(x, w, got_acc, scratch);
      matmul_accumulate(on_host(x), on_host(w), want_acc, host_scratch);
      EXPECT_LT(nmse(got_acc, to_device(want_acc, Device::CUDA)), 1e-10) << what << " accumulate";
    }
  }
}

TEST(CudaFusedMatmul, StreamedGroupAndSwigluMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  for (DType dtype : kStreamDtypes) {
    const int64_t k = kStreamKs[0];
    // Q (a multiple of 8 rows), then K and V of 516: the group of rows
    // Q + 512 .. Q + 519 spans K and V.
    const int64_t ms[] = {stream_rows(dtype, k), 516, 516};
    Tensor w[3], host_w[3], got[3], want[3];
    for (int i = 0; i < 3; ++i) {
      w[i] = random_weight(dtype, ms[i], k, 63 + i);
      host_w[i] = on_host(w[i]);
      got[i] = zeros(DType::F32, {1, ms[i]}, Device::CUDA);
      want[i] = Tensor::zeros(DType::F32, {1, ms[i]});
    }
    const Tensor x = device_f32(1, k, 66);
    ASSERT_TRUE(streams(x, w[0])) << dtype_name(dtype);  // (Q alone; the launch has K and V too)
    const Tensor* ws[] = {&w[0], &w[1], &w[2]};
    const Tensor* host_ws[] = {&host_w[0], &host_w[1], &host_w[2]};
    Tensor* got_ys[] = {&got[0], &got[1], &got[2]};
    Tensor* want_ys[] = {&want[0], &want[1], &want[2]};
    matmul_group(x, ws, got_ys);
    matmul_group(on_host(x), host_ws, want_ys);
    for (int i = 0; i < 3; ++i)
      EXPECT_LT(nmse(got[i], to_device(want[i], Device::CUDA)), 1e-10) << dtype_name(dtype) << " part " << i;

    // SwiGLU: a last group of 3 (of 4) rows, whole tiles.
    const int64_t k2 = 4096, inter = stream_rows(dtype, k2) / 2 + 3;
    const Tensor gate = random_weight(dtype, inter, k2, 67), up = random_weight(dtype, inter, k2, 68);
    const Tensor x2 = device_f32(1, k2, 69);
    ASSERT_TRUE(streams(x2, gate, &up)) << dtype_name(dtype) << " swiglu";
    Tensor out = zeros(DType::F32, {1, inter}, Device::CUDA), scratch = zeros(DType::F32, {1, inter}, Device::CUDA);
    Tensor out_cpu = Tensor::zeros(DType::F32, {1, inter}), scratch_cpu = Tensor::zeros(DType::F32, {1, inter});
    swiglu_matmul(x2, {.gate = gate, .up = up}, out, scratch);
    swiglu_matmul(on_host(x2), {.gate = on_host(gate), .up = on_host(up)}, out_cpu, scratch_cpu);
    EXPECT_LT(nmse(out, to_device(out_cpu, Device::CUDA)), 1e-10) << dtype_name(dtype) << " swiglu";
  }
}

// Up to 8 x rows stream too (a speculative verify, a small decode batch):
// each row of an n-row launch has the bits of that row launched alone, so a
// verify row equals a one-row decode; rows n = 2..8 cover the 2-, 4- and
// 8-row kernels with rows left unused. Plain, accumulate, a group of three
// and SwiGLU; x rows strided (ldx > k).
TEST(CudaFusedMatmul, StreamedRowsSameBitsAsOneRowEach) {
  REQUIRE_CUDA_DEVICE();
  for (DType dtype : kStreamDtypes) {
    const int64_t k = kStreamKs[0], m = stream_rows(dtype, k) + 3, ldx = k + 8;
    const Tensor w = random_weight(dtype, m, k, 80), gate = random_weight(dtype, m / 2, k, 81);
    const Tensor up = random_weight(dtype, m / 2, k, 82), kv = random_weight(dtype, 516, k, 83);
    const Tensor x_wide = device_f32(8, ldx, 84), x_all = x_wide.slice(1, 0, k);
    const Tensor residual = device_f32(8, m, 85);
    for (int n = 2; n <= 8; ++n) {
      const std::string what = std::string(dtype_name(dtype)) + " n=" + std::to_string(n);
      const Tensor x = x_all.slice(0, 0, n);
      ASSERT_TRUE(streams(x, w)) << what;
      Tensor y = zeros(DType::F32, {n, m}, Device::CUDA), acc = device_copy(residual.slice(0, 0, n));
      Tensor y_kv = zeros(DType::F32, {n, 516}, Device::CUDA), y_w = zeros(DType::F32, {n, m}, Device::CUDA);
      Tensor act = zeros(DType::F32, {n, m / 2}, Device::CUDA), scratch = zeros(DType::F32, {n, m}, Device::CUDA);
      Tensor act_scratch = zeros(DType::F32, {n, m / 2}, Device::CUDA);
      matmul(x, w, y);
      matmul_accumulate(x, w, acc, scratch);
      const Tensor* group_w[] = {&w, &kv};
      Tensor* group_y[] = {&y_w, &y_kv};
      matmul_group(x, group_w, group_y);
      swiglu_matmul(x, {.gate = gate, .up = up}, act, act_scratch);
      for (int r = 0; r < n; ++r) {
        const std::string row = what + " row " + std::to_string(r);
        const Tensor x1 = x.slice(0, r, r + 1);
        Tensor y1 = zeros(DType::F32, {1, m}, Device::CUDA), acc1 = device_copy(residual.slice(0, r, r + 1));
        Tensor y1_w = zeros(DType::F32, {1, m}, Device::CUDA), y1_kv = zeros(DType::F32, {1, 516}, Device::CUDA);
        Tensor act1 = zeros(DType::F32, {1, m / 2}, Device::CUDA), s1 = zeros(DType::F32, {1, m}, Device::CUDA);
        Tensor act1_scratch = zeros(DType::F32, {1, m / 2}, Device::CUDA);
        matmul(x1, w, y1);
        matmul_accumulate(x1, w, acc1, s1);
        Tensor* group_y1[] = {&y1_w, &y1_kv};
        matmul_group(x1, group_w, group_y1);
        swiglu_matmul(x1, {.gate = gate, .up = up}, act1, act1_scratch);
        expect_same_bits(device_copy(y.slice(0, r, r + 1)), y1, row);
        expect_same_bits(device_copy(acc.slice(0, r, r + 1)), acc1, row + " accumulate");
        expect_same_bits(device_copy(y_w.slice(0, r, r + 1)), y1_w, row + " group");
        expect_same_bits(device_copy(y_kv.slice(0, r, r + 1)), y1_kv, row + " group part 2");
        expect_same_bits(device_copy(act.slice(0, r, r + 1)), act1, row + " swiglu");
      }
      Tensor want = Tensor::zeros(DType::F32, {n, m});
      matmul(on_host(x), on_host(w), want);
      EXPECT_LT(nmse(y, to_device(want, Device::CUDA)), 1e-10) << what << " against the CPU";
    }
  }
}

// The norm taken into the streamed kernels: the same bits as rms_norm then
// the streamed kernel over x̂, with `normed` left unwritten. For the int8 types
// the norm is the x quantization kernel's, which lets the streamed GEMV
// launch before its own wait (launch.cuh, pdl_prologue_release_first).
TEST(CudaFusedMatmul, StreamedRmsNormFirstSameBitsAsRmsNormThenMatmul) {
  REQUIRE_CUDA_DEVICE();
  struct Case {
    DType dtype;
    int64_t k, m;
  };
  const Case cases[] = {{DType::BF16, 4096, 1028}, {DType::BF16, 2056, 2100}, {DType::F16, 4096, 1028},
                        {DType::F16, 2056, 2100},  {DType::Q8_0, 4096, 2048}, {DType::Q4_0, 4096, 2048},
                        {DType::Q4_K, 4096, 2048}};
  for (const auto [dtype, k, m] : cases) {
    const std::string what = std::string(dtype_name(dtype)) + " k=" + std::to_string(k);
    const Tensor gate_up = random_weight(dtype, 2 * m, k, 70);
    const Tensor gate = gate_up.slice(0, 0, m), up = gate_up.slice(0, m, 2 * m);
    const Tensor norm_w = device_f32(1, k, 71).reshape({k}), x = device_f32(1, k, 72);
    ASSERT_TRUE(streams(x, gate_up, nullptr, &norm_w)) << what;
    ASSERT_TRUE(streams(x, gate, &up, &norm_w)) << what << " swiglu";
    Tensor h = zeros(DType::F32, {1, k}, Device::CUDA), normed = nan_f32(1, k);
    rms_norm(x, norm_w, 1e-5f, h);
    Tensor got = zeros(DType::F32, {1, 2 * m}, Device::CUDA), want = zeros(DType::F32, {1, 2 * m}, Device::CUDA);
    const Tensor* ws[] = {&gate_up};
    Tensor* got_ys[] = {&got};
    Tensor* want_ys[] = {&want};
    matmul_group(h, ws, want_ys);
    matmul_group(x, {.weight = norm_w, .eps = 1e-5f, .normed = normed}, ws, got_ys);
    expect_same_bits(got, want, what + " group");

    Tensor act = zeros(DType::F32, {1, m}, Device::CUDA), act_want = zeros(DType::F32, {1, m}, Device::CUDA);
    Tensor scratch = zeros(DType::F32, {1, m}, Device::CUDA);
    swiglu_matmul(h, {.gate = gate, .up = up}, act_want, scratch);
    swiglu_matmul(x, {.weight = norm_w, .eps = 1e-5f, .normed = normed}, {.gate = gate, .up = up}, act, scratch);
    expect_same_bits(act, act_want, what + " swiglu");
    EXPECT_TRUE(all_nan(normed)) << what << ": normed written, norm not fused";
  }
}

// The norm handoff (ops/norm_handoff.h, backend/cuda/norm_handoff.h): a
// decode step's o_proj, MLP and Q/K/V at the 8B shape's widths (down at 64
// and 32 threads a row, o_proj at 16 or 32), once with a request before each
// matmul that adds to the residual and once without. The residual after
// o_proj has the same bits (the same sums, added in registers instead of in
// L2); the launches reading the handed-on norm see q rounded from y ⊙ g
// instead of x̂ and multiply by 1/rms at the end: NMSE < 1e-10 (measured
// 2.7e-14 to 1.6e-13: a q rounds the other way only where a value lies on a
// half).
TEST(CudaFusedMatmul, StreamedNormHandoffMatchesNormKernels) {
  REQUIRE_CUDA_DEVICE();
  struct Case {
    DType dtype;
    int64_t inter;
  };
  const Case cases[] = {{DType::Q4_0, 14336}, {DType::Q8_0, 8192}, {DType::Q4_K, 14336}, {DType::Q6_K, 8192}};
  constexpr int64_t kHidden = 4096, kKv = 1024;
  for (const auto [dtype, inter] : cases) {
    const std::string what = std::string(dtype_name(dtype)) + " inter=" + std::to_string(inter);
    const Tensor attn = device_f32(1, kHidden, 80), residual = device_f32(1, kHidden, 81);
    const Tensor wo = random_weight(dtype, kHidden, kHidden, 82);
    const Tensor gate = random_weight(dtype, inter, kHidden, 83), up = random_weight(dtype, inter, kHidden, 84);
    const Tensor down = random_weight(dtype, kHidden, inter, 85);
    const Tensor wq = random_weight(dtype, kHidden, kHidden, 86), wk = random_weight(dtype, kKv, kHidden, 87),
                 wv = random_weight(dtype, kKv, kHidden, 88);
    const Tensor ffn_norm = device_f32(1, kHidden, 89).reshape({kHidden});
    const Tensor attn_norm = device_f32(1, kHidden, 90).reshape({kHidden});
    ASSERT_TRUE(streams(attn, wo) && streams(residual, down) && streams(residual, gate, &up, &ffn_norm)) << what;
    struct Step {
      Tensor after_o, after_mlp, q, k, v;
    };
    auto step = [&](bool with_handoff) {
      Tensor y = device_copy(residual);
      Tensor h = zeros(DType::F32, {1, kHidden}, Device::CUDA), scratch = zeros(DType::F32, {1, kHidden}, Device::CUDA);
      Tensor hidden = zeros(DType::F32, {1, inter}, Device::CUDA),
             hidden2 = zeros(DType::F32, {1, inter}, Device::CUDA);
      Step s{.q = zeros(DType::F32, {1, kHidden}, Device::CUDA),
             .k = zeros(DType::F32, {1, kKv}, Device::CUDA),
             .v = zeros(DType::F32, {1, kKv}, Device::CUDA)};
      NormHandoff handoff;
      NormHandoff* hp = with_handoff ? &handoff : nullptr;
      handoff.request(y, ffn_norm);
      matmul_accumulate(attn, wo, y, scratch, {.hand_on = hp});
      s.after_o = device_copy(y);
      handoff.request(y, attn_norm);
      swiglu_mlp(
          y, {.weight = ffn_norm, .eps = 1e-5f, .normed = h, .handoff = hp},
          {.w_gate = gate, .w_up = up, .w_down = down, .hidden = hidden, .scratch = hidden2, .y_scratch = scratch}, y);
      s.after_mlp = device_copy(y);
      const Tensor* ws[] = {&wq, &wk, &wv};
      Tensor* ys[] = {&s.q, &s.k, &s.v};
      matmul_group(y, {.weight = attn_norm, .eps = 1e-5f, .normed = h, .handoff = hp}, ws, ys);
      return s;
    };
    const Step want = step(false);
    const int64_t read_before = cuda::detail::handed_norms_read();
    const Step got = step(true);
    // gate/up and Q/K/V read what o_proj and down handed on, but Q8_0's
    // down keeps the norm kernel (gemv_stream_rows_hands_on).
    EXPECT_EQ(cuda::detail::handed_norms_read() - read_before, dtype == DType::Q8_0 ? 1 : 2) << what;
    expect_same_bits(got.after_o, want.after_o, what + " residual after o_proj");
    const double errors[] = {nmse(got.after_mlp, want.after_mlp), nmse(got.q, want.q), nmse(got.k, want.k),
                             nmse(got.v, want.v)};
    std::printf("  handoff %s NMSE after the MLP %.2e, q %.2e, k %.2e, v %.2e\n", what.c_str(), errors[0], errors[1],
                errors[2], errors[3]);
    for (double e : errors) EXPECT_LT(e, 1e-10) << what;
  }
}

// The handoff is part of the ops' interface: only the ops given it take
// part, so another op between (a GEMV of another tensor) changes nothing,
// and a withdrawn request hands nothing on. A wrong use is an error, not
// stale numbers: y written between the two ops (ops::add, the case the
// thread-local handoff this replaced read stale), the reader normalizing a
// copy of y or with another norm weight, a writer given a request for
// another tensor. The control (its own norm right after) reads it once, so
// the read count can fail.
TEST(CudaFusedMatmul, NormHandoffMisuseIsAnError) {
  REQUIRE_CUDA_DEVICE();
  constexpr int64_t kHidden = 4096;
  const DType dtype = DType::Q4_0;
  const Tensor attn = device_f32(1, kHidden, 91), residual = device_f32(1, kHidden, 92);
  const Tensor wo = random_weight(dtype, kHidden, kHidden, 93), wq = random_weight(dtype, kHidden, kHidden, 94);
  const Tensor norm_a = device_f32(1, kHidden, 95).reshape({kHidden});
  const Tensor norm_b = device_f32(1, kHidden, 96).reshape({kHidden});
  ASSERT_TRUE(streams(attn, wo) && streams(residual, wq, nullptr, &norm_a));
  enum Next { kItsNorm, kGemvBetween, kWithdrawn, kAddToYBetween, kCopyOfY, kOtherNormWeight, kRequestForOther };
  const char* names[] = {
      "its own norm (control)", "a GEMV of another tensor between", "withdrawn", "ops::add to y between", "a copy of y",
      "another norm weight",    "a request for another tensor"};
  auto run = [&](Next next, bool with_handoff) {
    Tensor y = device_copy(residual), scratch = zeros(DType::F32, {1, kHidden}, Device::CUDA);
    Tensor h = zeros(DType::F32, {1, kHidden}, Device::CUDA), q = zeros(DType::F32, {1, kHidden}, Device::CUDA);
    NormHandoff handoff;
    NormHandoff* hp = with_handoff ? &handoff : nullptr;
    handoff.request(next == kRequestForOther ? scratch : y, norm_a);
    if (next == kWithdrawn) handoff.request(y, Tensor());
    matmul_accumulate(attn, wo, y, scratch, {.hand_on = hp});
    const Tensor* ws[] = {&wq};
    Tensor* ys[] = {&q};
    Tensor x = next == kCopyOfY ? device_copy(y) : y;
    if (next == kGemvBetween) matmul(attn, wq, scratch);
    if (next == kAddToYBetween) add(y, attn, y);
    matmul_group(x, {.weight = next == kOtherNormWeight ? norm_b : norm_a, .eps = 1e-5f, .normed = h, .handoff = hp},
                 ws, ys);
    return q;
  };
  for (Next next : {kItsNorm, kGemvBetween, kWithdrawn}) {
    const Tensor want = run(next, false);
    const int64_t read_before = cuda::detail::handed_norms_read();
    const Tensor got = run(next, true);
    const int64_t read = cuda::detail::handed_norms_read() - read_before;
    if (next == kWithdrawn) {
      EXPECT_EQ(read, 0) << names[next];
      expect_same_bits(got, want, names[next]);
    } else {
      EXPECT_EQ(read, 1) << names[next];
      EXPECT_LT(nmse(got, want), 1e-10) << names[next];
    }
  }
  for (Next next : {kAddToYBetween, kCopyOfY, kOtherNormWeight, kRequestForOther}) {
    EXPECT_NO_THROW(run(next, false)) << names[next];
    EXPECT_THROW(run(next, true), Error) << names[next];
  }
}

}  // namespace
}  // namespace brioche::ops

#else

TEST(CudaFusedMatmul, NotBuilt) { GTEST_SKIP() << "skipped: no CUDA device (built without BRIOCHE_CUDA)"; }

#endif
